"""How ``build`` writes to a terminal or a pipe: when to use ANSI codes (:func:`use_color`), rich consoles
that follow that rule, messages quoting user text made printable, and the progress of slow steps (a build,
a parameter conversion) as a rich bar on a terminal or plain lines every few seconds when piped.

Only the standard library at the top (``build --help`` starts without rich, numpy or the compiler); rich
and ``runtime.distributed`` are imported where used.
"""
from __future__ import annotations

import os
import sys
import time

#: Seconds between two plain progress lines when stderr is not a terminal.
PROGRESS_LINE_INTERVAL = 5.0


def in_launcher() -> bool:
    """True in a process that ``mpirun`` / ``torchrun`` started (their rank variables are set)."""
    from runtime.distributed import launcher_rank

    return launcher_rank() is not None


def use_color(stream, launched: bool | None = None) -> bool:
    """Whether to write ANSI codes (colours, bold, bars) to ``stream``: only on a terminal, never with
    ``NO_COLOR`` set (https://no-color.org) or, unless ``FORCE_COLOR`` is set, in a process of a launch
    (``launched``, default: :func:`in_launcher`): Open MPI forwards its ranks' output through a
    pseudo-terminal, so ``isatty()`` is true there even when ``mpirun``'s own output is a pipe."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return False
    return not (in_launcher() if launched is None else launched)


def make_console(stderr: bool = False, quiet: bool = False, color: bool | None = None):
    """A rich Console for stdout (or stderr) that writes ANSI codes only when :func:`use_color` says so
    (``color`` overrides), soft-wrapped (no line breaks inserted into long lines), no emoji, no automatic
    highlighting (user text is printed with ``markup=False`` or escaped)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    color = use_color(stream) if color is None else color
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False, quiet=quiet,
                   force_terminal=color, color_system="auto" if color else None, no_color=not color)


def worker_prefix() -> str:
    """``"rank R: "`` in a process of a multi-rank launch (mpirun / torchrun), else ``""``."""
    from runtime.distributed import launcher_rank

    rank = launcher_rank()
    return "" if rank is None else f"rank {rank}: "


def printable_lines(text: str) -> str:
    """A message that may quote user text (a path, a name) as the terminal should show it: each line's
    control characters (ANSI escape sequences included) escaped (:func:`schemas.errors.printable`),
    the lines kept."""
    from schemas.errors import printable

    return "\n".join(printable(line) for line in text.split("\n"))


def progress_console():
    """The stderr console of progress: silent on ranks other than 0 of a tensor-parallel launch (one
    line for the run, not one per rank)."""
    from runtime.distributed import launcher_rank

    return make_console(stderr=True, quiet=launcher_rank() not in (None, 0))


class ProgressLines:
    """Progress as plain lines on stderr when it is not a terminal (a pipe, a log file, ``mpirun``'s
    forwarding), in the place of a rich bar: ``update(text)`` writes ``text`` when
    :data:`PROGRESS_LINE_INTERVAL` seconds have passed since the last line, or at once with ``now`` (a new
    phase, the last step); ``stop()`` ends it (nothing to remove)."""

    def __init__(self, console) -> None:
        self.console = console
        self.last: float | None = None

    def update(self, text: str, now: bool = False) -> None:
        t = time.perf_counter()
        if now or self.last is None or t - self.last >= PROGRESS_LINE_INTERVAL:
            self.console.print(printable_lines(text), markup=False, highlight=False)
            self.last = t

    def stop(self) -> None:
        """Nothing to undo: the lines stay."""


def progress_display(lines: bool | None, columns: tuple, total: int, **fields):
    """``(display, task)``: a transient rich Progress bar on a terminal, or :class:`ProgressLines` (task
    None) when ``lines`` is true or, with ``lines`` None, when stderr is not a terminal."""
    err = progress_console()
    if lines if lines is not None else not err.is_terminal:
        return ProgressLines(err), None
    from rich.progress import Progress

    bar = Progress(*columns, console=err, transient=True)
    bar.start()
    return bar, bar.add_task(fields.pop("description", ""), total=total, **fields)


class BuildProgressDisplay:
    """``progress(step)`` of :func:`builder.compile`, once the build has taken longer than ``delay``
    seconds (nothing for a quick or cached build): on a terminal a transient rich progress line on stderr
    (phase, steps, the pass / kernel / LLVM module at hand, elapsed time); when stderr is not a terminal
    (or with ``lines``) a plain line at each new phase and every few seconds (:class:`ProgressLines`).
    ``silent``: nothing (``--quiet`` / ``--json``). ``bar``: what is shown, None before and after."""

    _PHASES = {"passes": "graph passes", "kernels": "kernels", "llvm": "LLVM (optimize + object code)",
               "bytecode": "bytecode"}

    def __init__(self, delay: float = 1.0, silent: bool = False, lines: bool | None = None) -> None:
        self.delay = delay
        self.silent = silent
        self.lines = lines
        self.bar = None
        self.task = None
        self.phase = ""

    def __call__(self, step) -> None:
        if step.phase == "done":
            self.close()
            return
        if self.silent or (self.bar is None and step.elapsed <= self.delay):
            return
        phase = self._PHASES.get(step.phase, step.phase)
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

            self.bar, self.task = progress_display(
                self.lines, (TextColumn("building: {task.fields[phase]}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.description}")), max(step.total, 1), phase="")
        if isinstance(self.bar, ProgressLines):
            self.bar.update(f"building: {phase} {step.done}/{max(step.total, 1)} ({step.elapsed:.0f} s) "
                            f"{step.item[:60]}".rstrip(), now=phase != self.phase)
        else:
            from rich.markup import escape

            self.bar.update(self.task, completed=step.done, total=max(step.total, 1),
                            description=escape(printable_lines(step.item[:60])), phase=phase)
        self.phase = phase

    def close(self) -> None:
        """Remove the line (if shown)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        self.phase = ""


class ConversionProgressDisplay:
    """``progress(done, total, name)`` for parameter conversions, once converting has taken longer than
    ``delay`` seconds: a rich progress bar on stderr on a terminal, plain lines every few seconds when
    stderr is not a terminal or with ``lines`` (:class:`ProgressLines`). ``silent``: nothing (``--quiet``
    / ``--json``). ``bar``: what is shown, None before and after."""

    def __init__(self, delay: float = 0.5, silent: bool = False, lines: bool | None = None) -> None:
        self.delay = delay
        self.silent = silent
        self.lines = lines
        self.start: float | None = None
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int, name: str) -> None:
        now = time.perf_counter()
        if done == 0 or self.start is None:
            self.close()
            self.start = now
            if done == 0:
                return
        if self.silent:
            return
        if self.bar is None and now - self.start > self.delay and done < total:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

            self.bar, self.task = progress_display(
                self.lines, (TextColumn("converting parameters"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.description}")), total, description=name)
        if isinstance(self.bar, ProgressLines):
            self.bar.update(f"converting parameters: {done}/{total} ({now - self.start:.0f} s) {name}",
                            now=done >= total)
        elif self.bar is not None:
            self.bar.update(self.task, completed=done, description=name)
        if done >= total:
            self.close()

    def close(self) -> None:
        """Remove the bar (if shown)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
