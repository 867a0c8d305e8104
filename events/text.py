"""Files' bytes as text: UTF-8 (as YAML and JSON are), or an error saying where they stop being it.

Every reader of a file a user names (a contract, a cluster file, job manifests) decodes it here, so a
file that is not UTF-8 is told the same way by every command: ``not UTF-8 text: invalid start byte
at line 1, byte 0 (b'\\xff'); save the file as UTF-8``. Pure, standard library only.
"""

from __future__ import annotations


class NotUtf8(ValueError):
    """Bytes that are not UTF-8 text, located: the line and byte where they stop being it."""

    def __init__(self, data: bytes, exc: UnicodeDecodeError):
        #: The text before the first byte that is not UTF-8 (a reader locates its document in it).
        self.before = data[:exc.start].decode("utf-8")
        self.line = self.before.count("\n") + 1
        self.start = exc.start
        self.reason = exc.reason
        bad = data[exc.start:exc.start + 1]
        super().__init__(f"not UTF-8 text: {exc.reason} at line {self.line}, byte {exc.start} ({bad!r}); "
                         "save the file as UTF-8")


def utf8_text(data: bytes) -> str:
    """``data`` decoded as UTF-8; NotUtf8 where it is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(data, exc) from None


def digits(text: str) -> bool:
    """Is ``text`` a non-negative integer written in ASCII digits? (``str.isdigit`` takes '²' and
    '٣', which ``int`` refuses or reads otherwise: a console query ``limit=²`` was a 500.)"""
    return text.isascii() and text.isdigit()
