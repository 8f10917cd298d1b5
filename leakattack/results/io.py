"""Files written atomically (temporary file + rename) and read back safely.

Every file appears whole or not at all, so an interrupted run never leaves a
half-written result.  Tensor files are read with ``weights_only=True``: a file
someone else wrote can hold tensors and plain containers, never code.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import os
import stat
import tempfile
import unicodedata
from pathlib import Path

import torch

from ..errors import UserError, shown_names
from ..jsonable import to_jsonable
from ..torchfile import load_torch_file


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def directory_mode() -> int:
    """The permissions a new folder gets under the process umask (mkdtemp makes 0700)."""
    return 0o777 & ~_UMASK


def unwritable_folder(path: str | os.PathLike) -> Path | None:
    """The folder that stops ``path`` from being created, or None when it can be: its nearest existing
    ancestor, tried by making (and removing) a folder in it, since permission bits do not tell for root or on
    a read-only or virtual file system (/proc)."""
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return parent
    try:
        os.rmdir(tempfile.mkdtemp(dir=parent, prefix=".leakattack-probe-"))
    except OSError:
        return parent
    return None


def folder_kind(path) -> str | None:
    """``"run"`` (a folder holding metrics.json), ``"sweep"`` (one holding results.jsonl), or None."""
    p = Path(path)
    if (p / "metrics.json").is_file():
        return "run"
    if (p / "results.jsonl").is_file():
        return "sweep"
    return None


def training_folder(path) -> bool:
    """Whether ``path`` is a training's run folder (holding protocol.json and train.jsonl) or the
    ``leakattack train --out`` folder one above it (holding the accuracy_vs_floats.png a training draws there beside
    such a folder), in which a training refuses to continue once other files are there.  A training's run folder
    copied elsewhere does not make the folder it was copied into a training's."""
    p = Path(path)
    if _trained_here(p):
        return True
    if not (p / "accuracy_vs_floats.png").is_file():
        return False
    try:
        with os.scandir(p) as entries:
            return any(e.is_dir(follow_symlinks=False) and _trained_here(Path(e.path)) for e in entries)
    except OSError:  # not a folder, or not readable: nothing of a training's is known there
        return False


def _trained_here(p: Path) -> bool:
    """Whether ``p`` is the run folder of a ``leakattack train`` (its protocol.json beside its train.jsonl)."""
    return (p / "protocol.json").is_file() and (p / "train.jsonl").is_file()


#: bytes an atomic write adds to a name for its temporary beside it (``.NAME.XXXXXXXX.tmp``)
TEMPORARY_NAME_EXTRA = 16
#: bytes a run folder's write adds to its name for the folders beside it (``.NAME.PID-HOST.XXXXXXXX.tmp``, PID up to
#: 7 digits and HOST 6)
RUN_FOLDER_NAME_EXTRA = 32


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system, among others: not there
        return False


def _name_max(path: Path) -> int:
    """The longest file name (bytes) the file system holding ``path`` (its nearest existing folder) takes."""
    folder = Path(os.path.abspath(path))
    while folder != folder.parent and not _exists(folder):
        folder = folder.parent
    try:
        return int(os.pathconf(folder if folder.is_dir() else folder.parent, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no answer: the common limit
        return 255


def writable_out(out: str | os.PathLike, file: str | None = None, *, beside: bool = False,
                 said: str | None = None) -> Path:
    """:func:`_writable_out`, where a path the system cannot look up (longer than it takes as a whole, a loop of
    symbolic links) is one sentence too.  ``said``: how the sentences name the path (default ``--out 'PATH'``; a run
    without ``--out`` names the place it writes to)."""
    short = said or f"--out '{_short(out)}'"  # a path the system cannot look up may be thousands of characters
    try:
        return _writable_out(out, file, beside=beside, said=said or f"--out '{out}'")
    except RuntimeError:  # Path.resolve: "Symlink loop from ..."
        raise UserError(f"{short} leads into a loop of symbolic links") from None
    except OSError as err:  # a path longer than PATH_MAX (File name too long), a loop (Too many levels of links)
        raise UserError(f"{short} cannot be looked up ({err.strerror or type(err).__name__}): "
                        f"name {'a folder' if file is None else f'a {file} file'} by another path") from None


def _short(out: str | os.PathLike) -> str:
    """``out`` as a message shows it: a path of thousands of characters, cut to its first and last 40."""
    text = str(out)
    return text if len(text) <= 100 else f"{text[:40]}...{text[-40:]}"


def _writable_out(out: str | os.PathLike, file: str | None, *, beside: bool, said: str) -> Path:
    """``--out`` as a path, refused in one sentence before any work when it cannot be written: a folder that is
    filled in place (``file`` None), or written beside itself and renamed into place (``beside``), never the root,
    the current folder, a folder that holds it or one inside a run, sweep or training folder (:func:`folder_kind`,
    :func:`training_folder`: a training refuses to continue in a folder holding what it does not write); or a file
    of that kind (``file=".csv"``), which is always written beside itself.  What an existing folder may hold is the
    command's to say (:func:`own_folder`)."""
    noun = "a folder" if file is None else f"a {file} file"
    if not str(out).strip():
        raise UserError(f"--out must name {noun}, got an empty string")
    control = next((c for c in str(out) if unicodedata.category(c) == "Cc"), None)
    if control is not None:  # every command's summary is one line ending in the path it wrote
        raise UserError(f"--out holds the control character {control!r}, which would break the one-line summary "
                        "that names it: name a path without control characters")
    path = Path(out)
    longest = max(path.parts, key=lambda part: len(os.fsencode(part)), default="")
    limit = _name_max(path) - (RUN_FOLDER_NAME_EXTRA if file is None and beside else TEMPORARY_NAME_EXTRA)
    if len(os.fsencode(longest)) > limit:
        raise UserError(f"--out names '{longest[:24]}...', a name of {len(os.fsencode(longest))} bytes, and this file "
                        f"system takes {limit} at most here (its limit less the temporary name written beside it): "
                        "name a shorter one")
    if file is None and path.resolve() == Path(path.resolve().anchor):
        raise UserError(f"{said} is the root folder, which a command never fills or replaces: name a folder "
                        "under it")
    if file is None and path.exists() and not path.is_dir():
        raise UserError(f"{said} is a file, not a folder")
    if file is not None and path.is_dir():
        raise UserError(f"{said} is a folder; name {noun}")
    if file is not None and path.exists() and not path.is_file():  # replaced by a file, a reader would wait on
        raise UserError(f"{said} is {_special_kind(path)}, not a file; name {noun}")
    if file is None and path.is_dir():  # filled in place or replaced whole: never the folder the command runs in
        here, target = Path.cwd().resolve(), path.resolve()
        if target == here or target in here.parents:
            done = "it would be replaced whole" if beside else "the command would fill it"
            raise UserError(f"{said} is the current folder or holds it, and {done}: name a new folder")
    for folder in path.resolve().parents:  # a run's, sweep's or training's files are its own
        kind = folder_kind(folder) or ("training" if training_folder(folder) else None)
        if kind is not None:
            raise UserError(f"{said} is inside the {kind} folder '{folder}', whose files are the {kind}'s "
                            f"own: name a {'folder' if file is None else 'file'} outside run, sweep and training "
                            "folders")
    if file is None and beside and path.is_dir() and os.path.ismount(path):  # a volume: it cannot be renamed
        raise UserError(f"{said} is a mount point, which a run cannot replace (it writes its folder beside it "
                        f"and renames it into place): name a folder inside it, such as '{path / 'run'}'")
    parent = unwritable_folder(path / "_" if file is None and not beside else path)
    if parent is not None:
        raise UserError(f"{said} cannot be written: '{parent}' is not a writable folder")
    if file is not None and path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{said} cannot be written: the file is read-only")
    return path


#: what :func:`own_folder` reads as "any file or folder, not looked into" in a layout
ANY = ...

#: the temporary files an atomic write leaves only when its process is killed (``.NAME.XXXX.tmp``)
_TEMPORARY = ".*.tmp"


def foreign_entries(folder: Path, layout: dict, prefix: str = "", wrong: list[str] | None = None) -> list[str]:
    """The entries below ``folder`` that ``layout`` does not describe, as paths relative to it (a folder's with a
    trailing slash): ``layout`` maps a name pattern (fnmatch) to None (a file), a nested layout (a folder, looked
    into) or :data:`ANY` (a file or a folder, not looked into); the temporary files of an atomic write are let pass,
    and so is what another process (a sweep writing the folder) removes or renames while it is read.  With ``wrong``
    a list, an entry of the other kind under a pattern other than the catch-all ``*`` (a folder where a file
    belongs, a file where a folder does) goes there instead."""
    other = []
    try:
        entries = sorted(folder.iterdir(), key=lambda e: e.name)
    except FileNotFoundError:  # removed since its parent was listed
        return []
    for entry in entries:
        name = entry.name
        if not os.path.lexists(entry):  # gone since the folder was listed (a temporary file renamed into place)
            continue
        if fnmatch.fnmatchcase(name, _TEMPORARY) and entry.is_file():
            continue
        pattern, kind = next(((k, v) for k, v in layout.items() if fnmatch.fnmatchcase(name, k)), ("", False))
        if kind is ANY or (kind is None and entry.is_file() and not entry.is_symlink()):
            continue
        if isinstance(kind, dict) and entry.is_dir() and not entry.is_symlink():
            other += foreign_entries(entry, kind, f"{prefix}{name}/", wrong)
            continue
        shown = prefix + name + ("/" if entry.is_dir() else "")
        # named by the layout (not its catch-all "*") as the other kind
        swapped = pattern != "*" and ((kind is None and entry.is_dir()) or (isinstance(kind, dict) and entry.is_file()))
        (wrong if wrong is not None and swapped and not entry.is_symlink() else other).append(shown)
    return other


def wrong_kind_text(out, wrong: list[str], what: str) -> str:
    """The refusal of an --out folder holding, under names ``what`` (``"a run"``) writes, entries of the other kind
    (:func:`foreign_entries`' ``wrong``: a folder's with a trailing slash)."""
    parts = [f"{e} (a folder, where {what} writes a file)" if e.endswith("/") else
             f"{e} (a file, where {what} writes a folder)" for e in wrong[:3]]
    more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
    return (f"--out '{out}' holds {', '.join(parts)}{more}, and {what} cannot write its own in their place: move "
            f"{'it' if len(wrong) == 1 else 'them'} away or name a new folder")


def own_folder(path: Path, out, layout: dict, what: str) -> Path:
    """``path`` (``--out``, spelt ``out``), refused in one sentence when it is a folder holding anything that
    ``what`` (``"a check"``) does not write there (``layout``, as :func:`foreign_entries` reads it): a missing or
    empty folder, or one holding only the command's own earlier output, is taken."""
    if not path.is_dir():
        return path
    wrong: list[str] = []
    try:
        other = foreign_entries(path, layout, wrong=wrong)
    except OSError as err:  # unreadable: what it holds is unknown
        other = [err.strerror or type(err).__name__]
    if wrong:
        raise UserError(wrong_kind_text(out, wrong, what))
    if other:
        raise UserError(f"--out '{out}' holds {shown_names(other)}, which {what} does not write, and {what} would mix "
                        f"its files in beside them: name a new folder or an earlier {what.split()[-1]}'s")
    return path


def absent_text(path: str | os.PathLike) -> str:
    """Why ``path``, which does not exist as a file or folder, cannot be read, in words: a symbolic link that
    leads nowhere (a missing target, a loop of links) is named as one."""
    if os.path.islink(path):
        return (f"'{path}' is a symbolic link that leads nowhere (its target does not exist, or the links form a "
                "loop)")
    return f"'{path}' does not exist"


def _special_kind(path: Path) -> str:
    """What a path that exists and is neither a file nor a folder is, in words."""
    mode = path.stat().st_mode
    return ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "neither a file nor a folder")


def link_target(path: str | os.PathLike) -> Path:
    """``path``, or the file it points to where it is a symbolic link: what a user's ``--out`` that is a link
    means (a shell's ``>`` writes there too); a command's own files are never looked through so."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and os.replace (a link at ``path`` is
    replaced, not written through: :func:`link_target`).  An OSError names ``path``, not the temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, OSError) and type(err) is not FileExistsError and err.filename in (None, tmp) \
                and err.errno is not None:  # a write() that failed names no file; mkstemp names its own
            raise OSError(err.errno, err.strerror or os.strerror(err.errno), str(path)) from err
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path, obj) -> None:
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read_object(path) -> dict:
    """The JSON object a file leakattack wrote holds (metrics.json, config.json, sweep.json); UserError, one
    sentence, where the file is not JSON text or holds something else (an edited or damaged file)."""
    try:
        data = read_json(path)
    except IsADirectoryError:
        raise UserError(f"'{path}' is a folder, not the file leakattack writes there") from None
    except FileNotFoundError:
        if not Path(path).is_symlink():
            raise
        raise UserError(f"'{path}' is a link to '{os.readlink(path)}', which does not exist") from None
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"'{path}' is not JSON") from None
    if not isinstance(data, dict):
        raise UserError(f"'{path}' holds a JSON {type(data).__name__}, not the object leakattack writes there")
    return data


#: config.json's parts, each an object in the file a run writes
CONFIG_PARTS = ("run", "derived", "environment")
#: the run settings a report or table prints as names (text, or null where unset)
CONFIG_NAMES = ("model", "attack", "recipe", "sketch", "dataset", "defense", "protocol", "message")
#: the run settings a report or table prints as counts (whole numbers, or null where unset)
CONFIG_COUNTS = ("batch_size", "iterations", "restarts", "image_index", "protocol_round", "protocol_client")


def quoted(v) -> str:
    """A stored value as a message quotes it (cut short)."""
    text = json.dumps(v) if not isinstance(v, float) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def read_config(path) -> dict:
    """A run's config.json (see :func:`read_object`), refused in one sentence naming the file and the key where one
    of its parts (run, derived, environment) is not an object, or where a setting that reports and tables print
    (:data:`CONFIG_NAMES`, :data:`CONFIG_COUNTS`) is of another type than a run writes: a hand-edited file."""
    config = read_object(path)
    for part in CONFIG_PARTS:
        if not isinstance(config.get(part, {}), dict):
            raise UserError(f"'{path}' is unreadable: its {part} is {quoted(config[part])}, not the object a run "
                            "writes")
    run = config.get("run", {})
    for key in CONFIG_NAMES + CONFIG_COUNTS:
        value = run.get(key)
        names = key in CONFIG_NAMES
        if value is None or (isinstance(value, str) if names else
                             isinstance(value, int) and not isinstance(value, bool)):
            continue
        raise UserError(f"'{path}' is unreadable: its run.{key} is {quoted(value)}, not the "
                        f"{'text' if names else 'whole number'} a run writes")
    return config


def csv_cell(v):
    """A CSV cell: empty for None, JSON for a list or dict (a grid value such as ["tv:0.1"]), else the value."""
    if v is None:
        return ""
    return json.dumps(to_jsonable(v)) if isinstance(v, (list, tuple, dict)) else v


def write_csv(path, rows: list[dict], columns: list[str] | None = None) -> None:
    """Rows of dicts as CSV; missing values are empty cells, lists and dicts JSON."""
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: csv_cell(r.get(k)) for k in columns})
    atomic_write_text(path, buf.getvalue())


def read_jsonl(path) -> list[dict]:
    """One JSON object per non-empty line; an unterminated last line that is not JSON (an append a kill cut short:
    :func:`leakattack.results.store.append_text` writes each line with its newline) is left out."""
    with open(path, encoding="utf-8") as fh:
        *lines, tail = fh.read().split("\n")
    rows = [json.loads(line) for line in lines if line.strip()]
    if tail.strip():
        try:
            rows.append(json.loads(tail))
        except ValueError:
            pass
    return rows


def write_tensors(path, obj) -> None:
    """Tensors (in dicts, lists, tuples) saved with torch.save, atomically."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_point_images(path) -> dict:
    """A sweep point's images file (``points/<key>.pt``): ``recon``, a (B, C, H, W) tensor, and ``truth``, one of
    that shape or None; anything else (a damaged or hand-made file) is refused in one sentence."""
    t = load_tensors(path)
    recon = t.get("recon") if isinstance(t, dict) else None
    truth = t.get("truth") if isinstance(t, dict) else None
    if not (isinstance(recon, torch.Tensor) and recon.dim() == 4 and recon.shape[0] >= 1
            and (truth is None or isinstance(truth, torch.Tensor) and truth.shape[1:] == recon.shape[1:])):
        raise UserError(f"'{path}' is not a sweep point's images (a 'recon' tensor of B images, C x H x W, and a "
                        "'truth' of the same image shape): a damaged file; remove it to draw the sweep without that "
                        "point's images")
    return t


def load_tensors(path):
    """A torch file read on the CPU with ``weights_only=True``; anything but tensors and plain containers, and a file
    torch cannot read, is refused in one sentence."""
    return load_torch_file(path, f"'{path}'")
