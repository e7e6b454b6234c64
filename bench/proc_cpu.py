"""CPU time of processes from /proc (Linux), for the benches: one process, a process and
its children, or a whole tree. Seconds of user + system time."""

from __future__ import annotations

import os

HZ = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (field 3 onwards)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_s(pid: int) -> float:
    """CPU seconds of one process so far."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / HZ


def _all() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks) of every process still readable."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = _stat(d)
        except OSError:
            continue
        table[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


def children_cpu(root: int) -> dict[int, float]:
    """CPU seconds of `root` and of every process under it, by pid (a server's stubs are
    its children, or its stub zygote's)."""
    table = _all()
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        found[pid] = table.get(pid, (0, 0))[1] / HZ
        todo.extend(p for p, (parent, _) in table.items() if parent == pid)
    return found


def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and all its descendants together."""
    table = _all()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += table.get(pid, (0, 0))[1]
        todo.extend(p for p, (parent, _) in table.items() if parent == pid)
    return total / HZ
