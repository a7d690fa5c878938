"""Every setting of the tutor, read once from the four layers: defaults < config file < MINIAGENT_* env vars <
CLI flags.

Each wing declares its own: the loop's limits and clocks (``agent.config.TutorConfig``), the model's
(``models.settings.ModelSettings``), the MCP server's faults (``tools.settings.ServerFaults``), the
OpenTelemetry traces (``telemetry.settings.TraceSettings``). One config file,
one set of env vars and one set of flags name them all, each name in one wing only; :func:`load_config` reads
them into one :class:`Settings` that hands each wing its part.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from .agent import config as tutor
from .agent.config import ConfigError, TutorConfig, layered, setting_types
from .models import settings as model
from .models.settings import ModelSettings
from .telemetry import settings as traces
from .telemetry.settings import TraceSettings
from .tools.settings import ServerFaults

WINGS = (TutorConfig, ModelSettings, ServerFaults, TraceSettings)
# A shared model server queues a class's requests: with llm = "openai" the model calls get a budget of their own
# unless one is set. Measured (docs/classroom.md): with 4 learners on one 2-core server, 28 of 30 runs ran out of
# a 20 s wall clock waiting in its queue.
SHARED_MODEL_WALL_CLOCK_S = 300.0


@dataclass
class Settings:
    tutor: TutorConfig = field(default_factory=TutorConfig)
    model: ModelSettings = field(default_factory=ModelSettings)
    faults: ServerFaults = field(default_factory=ServerFaults)
    traces: TraceSettings = field(default_factory=TraceSettings)

    def as_dict(self) -> dict[str, Any]:
        """Every setting by its name (the names are unique across the wings)."""
        return {**dataclasses.asdict(self.tutor), **dataclasses.asdict(self.model), **dataclasses.asdict(self.faults),
                **dataclasses.asdict(self.traces)}


def setting_fields() -> list[dataclasses.Field]:
    """Every setting of every wing, in declaration order (the CLI makes each one a flag)."""
    return [f for cls in WINGS for f in dataclasses.fields(cls)]


def load_config(cli: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                path: str | os.PathLike | None = None) -> Settings:
    """Merge the layers for every wing. ``cli`` values of ``None`` mean "flag not given"."""
    values = layered(setting_types(*WINGS), cli, env, path)
    if values.get("llm") == "openai" and "model_wall_clock_s" not in values:
        values["model_wall_clock_s"] = SHARED_MODEL_WALL_CLOCK_S
    settings = Settings(*(cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})
                          for cls in WINGS))
    tutor.check(settings.tutor)
    model.check(settings.model)
    traces.check(settings.traces)
    return settings


__all__ = ["ConfigError", "Settings", "SHARED_MODEL_WALL_CLOCK_S", "load_config", "setting_fields"]
