"""The training corpus: the King James Bible as Debian's bible-kjv-text package ships it
(public domain; `apt-get install bible-kjv-text`, which also installs the `bible` reader
that decompresses it). One document per chapter, one verse per line, verse numbers dropped.
Every VAL_EVERY-th chapter is held out for validation."""

import re
import shutil
import subprocess

VAL_EVERY = 40
REFERENCE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def read_chapters():
    exe = shutil.which("bible")
    if exe is None:
        raise SystemExit("the corpus needs Debian's bible-kjv-text: sudo apt-get install bible-kjv-text")
    text = subprocess.run(
        [exe, "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL
    ).stdout
    chapters, current, key = [], [], None
    for line in text.splitlines():
        m = REFERENCE.match(line)
        if m is None:
            raise SystemExit(f"unexpected line in the bible output: {line!r}")
        book, chapter, _, verse = m.groups()
        if (book, chapter) != key and current:
            chapters.append("\n".join(current))
            current = []
        key = (book, chapter)
        current.append(verse.strip())
    chapters.append("\n".join(current))
    return chapters


def split(chapters):
    train = [c for i, c in enumerate(chapters) if i % VAL_EVERY != VAL_EVERY - 1]
    val = [c for i, c in enumerate(chapters) if i % VAL_EVERY == VAL_EVERY - 1]
    return train, val
