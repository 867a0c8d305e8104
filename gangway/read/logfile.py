"""Exported logs: one structured-mode CloudEvent per line, carrying its log offset (``logoffset``).

A dry run's export ends with its rejections (JobRejected, offsets in gangway.rejections, as the
submission service writes them there): they are not the log's, and ``read_export`` gives them apart."""

from __future__ import annotations

from pathlib import Path

import msgspec

from gangway.events import codec
from gangway.events.catalogue import Envelope, JobRejected


class LogFileError(ValueError):
    """A line of an exported log that is not one of gangway's CloudEvents."""


def write_export(envs: list[Envelope], path: str, rejections: list[Envelope] = ()) -> None:
    """The log ``envs``, then the ``rejections`` (JobRejected) that go with it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for env in [*envs, *rejections]:
            out.write(codec.structured_line(env) + b"\n")


def read_export(path: str, rejections: list[Envelope] | None = None) -> list[Envelope]:
    """The log of an exported file; its JobRejected, if any, go to ``rejections`` (when given)."""
    envs = []
    with open(path, "rb") as src:
        for number, raw in enumerate(src, 1):
            if not raw.strip():
                continue
            try:
                env = codec.from_structured_line(raw)
            except (msgspec.DecodeError, codec.CodecError, AttributeError) as exc:
                raise LogFileError(f"{path}:{number}: {exc}") from exc
            if not isinstance(env.data, JobRejected):
                envs.append(env)
            elif rejections is not None:
                rejections.append(env)
    return envs
