"""The seccomp filter every sandbox runs under, assembled as classic BPF (no libseccomp needed).

The agent loads it from a pipe as the last step of its setup, before it says it is ready, so the
agent and everything it runs live under it. The filter refuses with EPERM the calls an escape or an
attack on the host kernel starts from: debugging other processes (ptrace, process_vm_*,
pidfd_getfd, kcmp), mounting and namespaces (mount family, unshare, setns, clone with namespace
flags), kernel loading and tracing (kexec, modules, bpf, perf_event_open, io_uring, userfaultfd),
the kernel keyring, clock and host settings, and file handles that bypass paths. `clone3` gets
ENOSYS so libc falls back to `clone`, whose flags a classic filter can read. A foreign architecture
(an x32 or 32-bit call on x86-64) is refused too: its numbers mean other calls.
"""

import errno
import platform
import struct

from shipyard.errors import InvalidInput

_GROUPS = (  # one kind a line
    "ptrace process_vm_readv process_vm_writev pidfd_getfd kcmp",
    "mount umount2 pivot_root chroot fsopen fsconfig fsmount fspick move_mount open_tree",
    "mount_setattr unshare setns",
    "kexec_load kexec_file_load init_module finit_module delete_module bpf perf_event_open",
    "io_uring_setup io_uring_enter io_uring_register userfaultfd",
    "keyctl add_key request_key",
    "reboot swapon swapoff sethostname setdomainname settimeofday clock_settime clock_adjtime",
    "adjtimex acct syslog quotactl vhangup lookup_dcookie open_by_handle_at name_to_handle_at",
)
DENIED = [name for group in _GROUPS for name in group.split()]
_X86_ONLY = {"iopl": 172, "ioperm": 173, "modify_ldt": 154, "uselib": 134}

# Syscall numbers per architecture (x86_64: asm/unistd_64.h; aarch64: asm-generic/unistd.h).
_NUMBERS = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
        "kcmp": 312, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
        "open_tree": 428, "mount_setattr": 442, "unshare": 272, "setns": 308,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "bpf": 321, "perf_event_open": 298, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323, "keyctl": 250,
        "add_key": 248, "request_key": 249, "reboot": 169, "swapon": 167, "swapoff": 168,
        "sethostname": 170, "setdomainname": 171, "settimeofday": 164, "clock_settime": 227,
        "clock_adjtime": 305, "adjtimex": 159, "acct": 163, "syslog": 103, "quotactl": 179,
        "vhangup": 153, "lookup_dcookie": 212, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "clone": 56, "clone3": 435, **_X86_ONLY,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
        "kcmp": 272, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
        "open_tree": 428, "mount_setattr": 442, "unshare": 97, "setns": 268,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "bpf": 280, "perf_event_open": 241, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 282, "keyctl": 219,
        "add_key": 217, "request_key": 218, "reboot": 142, "swapon": 224, "swapoff": 225,
        "sethostname": 161, "setdomainname": 162, "settimeofday": 170, "clock_settime": 112,
        "clock_adjtime": 266, "adjtimex": 171, "acct": 89, "syslog": 116, "quotactl": 60,
        "vhangup": 58, "lookup_dcookie": 18, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "clone": 220, "clone3": 435,
    },
}  # fmt: skip
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000  # x86-64 calls with this bit set are the x32 ABI's

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NAMESPACES |= 0x20000000 | 0x40000000 | 0x00000080

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data
_INSN = struct.Struct("=HBBI")


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return _INSN.pack(code, jt, jf, k)


def _refuse(error: int) -> bytes:
    return _insn(_RET_K, _ERRNO | error)


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (default this host's) as bytes (`struct sock_filter`s)."""
    machine = machine or platform.machine()
    if machine not in _NUMBERS:
        raise InvalidInput(
            f"no seccomp syscall table for architecture {machine!r} "
            f"(known: {', '.join(sorted(_NUMBERS))})"
        )
    numbers = _NUMBERS[machine]
    out = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH[machine], jt=1),
        _insn(_RET_K, _KILL_PROCESS),
    ]
    out.append(_insn(_LD_W_ABS, _NR))
    if machine == "x86_64":
        out += [_insn(_JGE_K, _X32_BIT, jf=1), _refuse(errno.EPERM)]
    names = DENIED + [name for name in _X86_ONLY if name in numbers]
    for name in names:  # each: equal → next instruction refuses, else skip it
        out += [_insn(_JEQ_K, numbers[name], jf=1), _refuse(errno.EPERM)]
    out += [_insn(_JEQ_K, numbers["clone3"], jf=1), _refuse(errno.ENOSYS)]
    # clone: refuse namespace flags in its first argument (the low 32 bits hold them all).
    out += [
        _insn(_JEQ_K, numbers["clone"], jf=3),
        _insn(_LD_W_ABS, _ARG0),
        _insn(_JSET_K, CLONE_NAMESPACES, jf=1),
        _refuse(errno.EPERM),
        _insn(_RET_K, _ALLOW),
    ]
    return b"".join(out)
