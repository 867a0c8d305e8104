"""Exported logs: one structured-mode CloudEvent per line, carrying its log offset (``logoffset``)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from gangway.events import codec
from gangway.events.catalogue import Envelope


class LogFileError(ValueError):
    """A line of an exported log that is not one of gangway's CloudEvents."""


def write_export(envs: list[Envelope], path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for env in envs:
            out.write(codec.structured_line(env) + b"\n")


def read_export(path: str) -> list[Envelope]:
    envs = []
    with open(path, "rb") as src:
        for number, raw in enumerate(src, 1):
            if not raw.strip():
                continue
            try:
                envs.append(codec.from_structured_line(raw))
            except (msgspec.DecodeError, codec.CodecError, AttributeError) as exc:
                raise LogFileError(f"{path}:{number}: {exc}") from exc
    return envs
