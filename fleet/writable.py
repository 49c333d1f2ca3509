"""Whether a file a command is asked to write can be written, checked before the work that
fills it (a night of probing, a report's build): a wrong path is refused at once, naming
what to change, rather than found after the work is done."""

from __future__ import annotations

import os
from pathlib import Path

from fleet.errors import InputError


def writable_file(target: Path, option: str, example: str) -> Path:
    """`target`, where it can be written: not a directory, in a directory that exists and
    lets this user write; else InputError naming `option` and, for a directory, a file
    name such as `example` inside it."""
    if target.is_dir():
        raise InputError(f"{option} {target}: is a directory; give a file name such as "
                         f"{target / example}")
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{option} {target}: the directory {folder} does not exist; create "
                         "it or give another path")
    if not os.access(folder, os.W_OK):
        raise InputError(f"{option} {target}: cannot write in {folder}; give another path")
    return target
