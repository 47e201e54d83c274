"""One lock per run directory, taken by every writer of a run: dataset generation or loading, scoring, merging, the
analysis and the report.

The lock is the file ``{run}/.lock`` (``paths.lock_path``), created exclusively; it records the holder's PID, host,
command line, start time and a random token. A process that holds a run's lock puts the token in the environment
variable ``NBUTILS_RUN_LOCKS`` while it holds it, so the notebook kernels and jobs it starts (which inherit it) write
under its lock instead of being refused. Anyone else is refused with the holder's PID, command and start time; a
lock left by a dead process on this host is taken over with a note.
"""
from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from . import paths

TOKENS_ENV = "NBUTILS_RUN_LOCKS"  # tokens of the locks held by this process or the process that started it
_held: dict[Path, str] = {}  # lock file -> token, for the locks this process holds (so a writer inside a writer nests)


class LockedError(RuntimeError):
    """Another live process holds the run directory's lock."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _inherited() -> set[str]:
    return set(filter(None, os.environ.get(TOKENS_ENV, "").split(os.pathsep)))


def _read(lock: Path) -> dict:
    try:
        held = json.loads(lock.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def _not_a_lock(lock: Path) -> str | None:
    """What lies at ``lock`` in words when it is not a lock record this suite wrote (a folder, a link, an empty or
    unreadable file); None for a record naming a PID and a host."""
    if lock.is_symlink():
        return f"a symbolic link to {os.readlink(lock)}" + ("" if lock.exists() else " (which does not exist)")
    if lock.is_dir():
        return "a folder"
    if not lock.is_file():
        return "neither a file nor a folder" if lock.exists() else None
    held = _read(lock)
    if isinstance(held.get("pid"), int) and held.get("host"):
        return None
    size = lock.stat().st_size
    return ("an empty file (a process may be taking the lock this instant: try again in a moment)" if not size
            else f"a file of {size} bytes that is not a lock record (no pid and host in it)")


def holder_line(held: dict) -> str:
    """Who holds a lock, in words: PID, host, command and start time."""
    cmd = held.get("command")
    return (f"pid {held.get('pid')} on {held.get('host')}" + (f" (command: {cmd})" if cmd else "")
            + f" since {held.get('started')}")


@contextmanager
def hold(run_dir, what: str = "writing"):
    """Hold ``run_dir``'s lock while the block runs (``what`` says what for, in the refusal). Nested and inherited
    holds (a kernel the holder started) pass through; a live other holder is a ``LockedError`` naming it; a stale
    lock of a dead process on this host is taken over with a note."""
    run = paths.check_run_dir(run_dir)
    lock = paths.lock_path(run)
    held = _read(lock) if lock.exists() else {}
    if lock in _held or (held.get("token") and held["token"] in _inherited()):
        yield lock
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": shlex.join(sys.argv) or sys.executable,
          "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "token": token}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            odd = _not_a_lock(lock)
            if odd:
                raise LockedError(f"run_dir: the lock {lock} is {odd}, not a lock this suite wrote; nothing was "
                                  f"written to {lock.parent}: when no process of this suite is using that run, "
                                  f"remove it (rm -r '{lock}') and run again") from None
            held = _read(lock)
            if held.get("host") == me["host"] and isinstance(held.get("pid"), int) and not _alive(held["pid"]):
                print(f"[lock] taking over a stale lock on {lock.parent} (pid {held['pid']} is gone; it ran "
                      f"{held.get('command') or 'an unknown command'}, started {held.get('started')})", flush=True)
                lock.unlink(missing_ok=True)
                continue
            raise LockedError(f"run_dir: {lock.parent} is in use by {holder_line(held)}; {what} it now could mix its "
                              f"files with that process's: wait for it to end, or delete {lock} if that process is "
                              "gone") from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    _held[lock] = token
    saved = os.environ.get(TOKENS_ENV)
    os.environ[TOKENS_ENV] = os.pathsep.join(sorted(_inherited() | {token}))
    try:
        yield lock
    finally:
        _held.pop(lock, None)
        if saved is None:
            os.environ.pop(TOKENS_ENV, None)
        else:
            os.environ[TOKENS_ENV] = saved
        if _read(lock).get("token") == token:
            lock.unlink(missing_ok=True)
