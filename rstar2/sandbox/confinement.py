"""Confines one freshly forked sandbox child: fresh tmpfs, rlimits, unprivileged uid, seccomp.

Applied in this order inside the child, before any untrusted code runs:
1) its own process group (so the zygote can kill everything it starts with one killpg);
2) a private mount namespace with a fresh tmpfs on /tmp, its working directory (needs
   CAP_SYS_ADMIN: the zygote runs as root inside bubblewrap); nothing it writes survives it;
3) rlimits: CPU seconds, address space (the zygote's own plus the request's allowance), file
   size, open files, processes; no core files;
4) a distinct unprivileged uid/gid per concurrent slot, so RLIMIT_NPROC binds and a request
   cannot signal the zygote or a concurrent request;
5) a seccomp filter returning EPERM for socket creation, exec, ptrace, mount, namespace and
   session changes (so it cannot leave its process group) and other kernel attack surface.

What it does not do: decide whether a layer is wanted (the zygote's config says so) or bound
memory across all children (the concurrency limit times `memory_mb` does). Standard library
plus the optional `pyseccomp`: this file runs inside the sandbox.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
from dataclasses import dataclass
from typing import Any

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)

DENIED_SYSCALLS = (
    "socket", "socketpair", "execve", "execveat", "ptrace", "process_vm_readv",
    "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "setsid", "setpgid", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
    "request_key", "io_uring_setup", "kexec_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "open_by_handle_at",
    "name_to_handle_at", "mount_setattr", "fsopen", "fsmount", "move_mount", "open_tree",
)  # fmt: skip

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


@dataclass(frozen=True)
class Limits:
    """The rlimits of one request."""

    cpu_s: int
    memory_bytes: int
    file_bytes: int
    open_files: int
    processes: int


def load_seccomp() -> Any:
    """Import pyseccomp inside the sandbox, or return None when it or libseccomp is missing."""
    # ctypes.util.find_library runs `ldconfig -p`, which the sandbox does not contain; the
    # sonames are stable, so name them and let the dynamic loader find them.
    original = ctypes.util.find_library
    sonames = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}
    ctypes.util.find_library = lambda name: sonames.get(name) or original(name)
    try:
        import pyseccomp
    except (ImportError, OSError, RuntimeError):
        return None
    finally:
        ctypes.util.find_library = original
    return pyseccomp


def build_syscall_filter(seccomp: Any) -> CompiledFilter:
    """A filter (built once in the zygote, loaded in each child) denying DENIED_SYSCALLS."""
    deny = seccomp.ERRNO(errno.EPERM)
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            flt.add_rule(deny, name)
        except (ValueError, OSError):
            pass  # a syscall this kernel/arch does not have cannot be called either
    for flag in _NAMESPACE_FLAGS:
        flt.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, which seccomp cannot inspect: answer ENOSYS so that
    # libc falls back to clone, whose flags are checked above.
    flt.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return CompiledFilter(flt)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class CompiledFilter:
    """A seccomp BPF program compiled once (libseccomp takes ~3 ms per compile) and installed
    in each child with one prctl."""

    def __init__(self, flt: Any) -> None:
        fd = os.memfd_create("seccomp-bpf")
        with os.fdopen(fd, "w+b") as f:
            flt.export_bpf(f)
            f.seek(0)
            program = f.read()
        if not program or len(program) % 8:
            raise ValueError(f"libseccomp exported {len(program)} bytes, not a BPF program")
        self._buf = ctypes.create_string_buffer(program, len(program))
        self._prog = _SockFprog(len(program) // 8, ctypes.addressof(self._buf))

    def load(self) -> None:
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        prog = ctypes.byref(self._prog)
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def fresh_tmpfs(path: str, size_mb: int, uid: int | None) -> None:
    """Mount a new private tmpfs on `path`, owned by `uid`, in a new mount namespace."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    # Without this a mount could propagate back into a shared parent namespace.
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private failed")
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    options = f"size={size_mb}m,mode=0700{owner}".encode()
    flags = MS_NOSUID | MS_NODEV
    if _libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, options) != 0:
        raise OSError(ctypes.get_errno(), f"mounting a tmpfs on {path} failed")


def address_space_bytes() -> int:
    """This process's current virtual size (what a fork child starts with)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def apply_limits(limits: Limits) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


def drop_privileges(uid: int) -> None:
    """Become `uid` (gid = uid, no groups) for good: capabilities go with root."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
