"""Exported logs: one structured-mode CloudEvent per line, carrying its log offset (``logoffset``).

The last line of an export also carries ``logend``, the offset after the last event exported: an
auditor can tell an export cut after some line from one that ends where it was written. (A
CloudEvents extension attribute: a reader that does not know it ignores it; exports written before
it have none.)

A line whose writer does not write its type on the log (``codec.LOG_WRITERS``) is quarantined as
every reader of the broker's log quarantines it: never folded, and listed (``LogFile.quarantined``)
for the auditor to report.

A dry run's export ends with its rejections (JobRejected, offsets in gangway.rejections, as the
submission service writes them there), after the line that marks the log's end: they are not the
log's, and the readers give them apart (``LogFile.rejections``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgspec

from gangway.events import codec
from gangway.events.catalogue import Envelope, JobRejected

#: CloudEvents extension attribute of an export's last line: the offset after its last event.
END_EXT = "logend"


class LogFileError(ValueError):
    """A line of an exported log that is not one of gangway's CloudEvents."""


class Quarantined(NamedTuple):
    """A line of an export that no reader folds: its writer does not write its type on the log (as
    the auditor takes it: line, offset, why)."""

    line: int
    offset: int
    message: str
    reason: str


@dataclass
class LogFile:
    """An export as read: its events, the file line of each, the lines quarantined, and the end
    its last line marks (None: not marked — an older export, or one cut after some line)."""

    path: str
    envs: list[Envelope] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    end: int | None = None
    #: A dry run's rejections, written after the log (not the log's events).
    rejections: list[Envelope] = field(default_factory=list)
    #: Lines where no line of an export stands, as (line, why): a rejection among the log's lines,
    #: log lines after the one marking the end (an export edited or pasted together).
    misplaced: list[tuple[int, str]] = field(default_factory=list)


def write_export(envs: list[Envelope], path: str, rejections: list[Envelope] = ()) -> None:
    """The log ``envs``, its last line marking its end, then the ``rejections`` (JobRejected) that
    go with it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for env in envs[:-1]:
            out.write(codec.structured_line(env) + b"\n")
        if envs:
            last = codec.to_structured(envs[-1])
            if envs[-1].offset >= 0:
                last[END_EXT] = envs[-1].offset + 1
            out.write(msgspec.json.encode(last) + b"\n")
        for env in rejections:
            out.write(codec.structured_line(env) + b"\n")


class _End(msgspec.Struct):
    logend: int = -1


_GZIP = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


def read_log_file(path: str) -> LogFile:
    """Every line of an export, decoded (``LogFileError`` names the first line that is not one of
    gangway's CloudEvents)."""
    log = LogFile(path)
    envs, lines = log.envs, log.lines
    marked: int | None = None  # the line marking the end, if one does
    rejected_at: int | None = None  # the first rejection's line
    with open(path, "rb") as src:
        for number, raw in enumerate(src, 1):
            if number == 1 and raw.startswith(_GZIP):
                raise LogFileError(f"{path}: a gzip file: decompress it first (gunzip), an export is one JSON "
                                   "CloudEvent a line")
            if number == 1 and raw.startswith(_BOM):  # (an editor's byte-order mark: not part of the line)
                raw = raw[len(_BOM):]
            if not raw.strip():
                continue
            try:
                env = codec.from_structured_line(raw)
            except UnicodeDecodeError as exc:  # (a byte edited in a string: JSON text is UTF-8)
                raise LogFileError(f"{path}:{number}: not UTF-8 text ({exc.reason} at byte {exc.start} of the "
                                   "line's field)") from exc
            except (msgspec.DecodeError, codec.CodecError, AttributeError) as exc:
                raise LogFileError(f"{path}:{number}: {exc}") from exc
            if env.offset < 0 and not isinstance(env.data, JobRejected):
                raise LogFileError(f"{path}:{number}: no {codec.OFFSET_EXT}: every event of an export carries "
                                   "its offset in the log")
            if b'"time":' not in raw:  # (read as 1970: a workload's hours then span the epoch)
                raise LogFileError(f"{path}:{number}: no time: every event of an export carries its time")
            if isinstance(env.data, JobRejected):
                log.rejections.append(env)
                rejected_at = number if rejected_at is None else rejected_at
                continue
            if rejected_at is not None:
                log.misplaced.append((rejected_at, "a JobRejected among the log's lines (a dry run's rejections "
                                                   "come after the line that marks the log's end)"))
                rejected_at = None
            if marked is not None:
                log.misplaced.append((number, f"line {number} and those after it come after line {marked}, which "
                                              "marks the export's end (lines appended to the export?)"))
                marked = None
            end = _end_of(raw) if _END_KEY in raw else None
            if end is not None:
                marked, log.end = number, end
            refused = codec.writer_refusal(env)
            if refused is not None:
                log.quarantined.append(Quarantined(number, env.offset, str(refused), refused.reason))
                continue
            envs.append(env)
            lines.append(number)
    return log


_END_KEY = f'"{END_EXT}"'.encode()


def _end_of(raw: bytes) -> int | None:
    """The end a line marks (its top-level ``logend``), if it marks one."""
    try:
        end = msgspec.json.decode(raw, type=_End).logend
    except msgspec.MsgspecError:
        return None
    return end if end >= 0 else None


def read_export(path: str, rejections: list[Envelope] | None = None) -> list[Envelope]:
    """The events of an export that every reader folds (quarantined lines left out); a dry run's
    rejections, if any, go to ``rejections`` (when given)."""
    log = read_log_file(path)
    if rejections is not None:
        rejections.extend(log.rejections)
    return log.envs
