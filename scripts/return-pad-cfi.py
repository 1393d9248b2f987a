#!/usr/bin/env python3
"""Prints the `.cfi_escape` lines of the return pad in src/arch/ARCH/exit.s (x86_64, the
default, aarch64, riscv64 or s390x: instrfn_ARCH_return_pad): DW_CFA_expression for the return
address column, the DWARF expression that finds a replaced return address's original in the
shadow stacks (src/arch/x86_64/exit.s describes the search). Operands in braces are filled by
trampoline_asm! (src/arch/mod.rs) and must encode in one byte (< 128: asserted there), which
the branch offsets computed here assume. A test checks that each exit.s holds exactly these
lines: edit the expression here, then paste the output over them.

    scripts/return-pad-cfi.py [x86_64|aarch64|riscv64|s390x]

Stack states are written [bottom .. top]; the unwinder pushes the CFA first (below them all).
The frame's own pc (x86_64 rip, column 16; aarch64 x30, riscv64 ra and s390x r14, the return
address columns, which libgcc restores as registers: LLVM's libunwind does not, so these are
for libgcc) is the label after the pad; the pc-relative word before the pad leads to the
registry R. The key that finds the returning frame's entry: its slot, x86_64 and riscv64
sp - 8, s390x r15 + 112; aarch64 its caller's frame pointer, x29 (the entry's SH_FP word, what
its exit trampoline compares too).
"""
import sys

ARCH = sys.argv[1] if len(sys.argv) > 1 else "x86_64"
if ARCH not in ("x86_64", "aarch64", "riscv64", "s390x"):
    sys.exit("usage: return-pad-cfi.py [x86_64|aarch64|riscv64|s390x]")

OP = {  # DWARF 5, 7.7.1
    "deref": 0x06, "dup": 0x12, "drop": 0x13, "pick": 0x15, "swap": 0x16, "rot": 0x17,
    "plus": 0x22, "plus_uconst": 0x23, "bra": 0x28, "eq": 0x29, "ge": 0x2a, "skip": 0x2f,
    "lit0": 0x30, "breg1": 0x71, "breg2": 0x72, "breg7": 0x77, "breg14": 0x7e, "breg15": 0x7f,
    "breg16": 0x80, "breg29": 0x8d, "breg30": 0x8e,
}
if ARCH == "x86_64":
    PC, TO_WORD, RA_COLUMN = "breg16", 0x77, 16    # the word 9 bytes before (SLEB -9)
    KEY = ["breg7", 0x78]                          # rsp - 8
elif ARCH == "aarch64":
    PC, TO_WORD, RA_COLUMN = "breg30", 0x74, 30    # the word 12 bytes before (SLEB -12)
    KEY = ["breg29", 0x00]                         # x29
elif ARCH == "riscv64":
    PC, TO_WORD, RA_COLUMN = "breg1", 0x74, 1      # ra; the word 12 bytes before
    KEY = ["breg2", 0x78]                          # sp - 8 (only CFA - 8 slots are replaced)
else:
    PC, TO_WORD, RA_COLUMN = "breg14", 0x74, 14    # r14; the word 12 bytes before
    KEY = ["breg15", 0xf0, 0x00]                   # r15 + 112 (SLEB 112: two bytes)

code = []  # ("b", byte or "{OPERAND}") | ("br", op, label) | ("at", label)


def b(*items):
    for x in items:
        code.append(("b", OP.get(x, x) if isinstance(x, str) and not x.startswith("{") else x))


def br(op, label):
    code.append(("br", OP[op], label))


def at(label):
    code.append(("at", label))


# The registry R, from the pc-relative word before the pad.
b(PC, TO_WORD, "dup", "deref", "plus")                       # [R]
b("dup", "plus_uconst", 8, "deref")                          # [R size]
b("swap", "deref", "deref")                                  # [size b]: the newest block
b(*KEY, "swap")                                              # [size key b]
b(PC, TO_WORD, "dup", "deref", "plus", "plus_uconst", 16)    # [size key b best]: &R[2], 0
at("blocks")
b("pick", 1, "lit0", "eq"); br("bra", "done")                # no more blocks
b("pick", 1, "plus_uconst", "{BLK_SHADOW}", "deref")         # [size key b best base]
b("dup", "lit0", "eq"); br("bra", "no_shadow")
b("dup", "pick", 5, "plus", "rot")                           # [size key b end best e]
at("entries")
b("dup", "pick", 3, "ge"); br("bra", "next_block")           # past the mapping
b("dup", "plus_uconst", "{SH_SLOT}", "deref", "dup", "lit0", "eq"); br("bra", "free")
if ARCH == "aarch64":
    b("drop", "dup", "plus_uconst", "{SH_FP}", "deref")      # [.. e fp]
b("pick", 5, "eq"); br("bra", "match")                       # slot (fp) == key
b("plus_uconst", "{SH_BYTES}"); br("skip", "entries")
at("match")                                                  # best = &e.ret; on
b("swap", "drop", "dup", "plus_uconst", "{SH_RET}", "swap", "plus_uconst", "{SH_BYTES}")
br("skip", "entries")
at("free")                                                   # [.. e slot]
b("drop")
at("next_block")                                             # [size key b end best e]
b("drop", "swap", "drop"); br("skip", "advance")             # [size key b best]
at("no_shadow")                                              # [size key b best base]
b("drop")
at("advance")                                                # b = b.next (its first word)
b("swap", "deref", "swap"); br("skip", "blocks")
at("done")                                                   # best on top: the result

where, n = {}, 0
for item in code:
    if item[0] == "at":
        where[item[1]] = n
    else:
        n += 1 if item[0] == "b" else 3
out, n = [], 0
for item in code:
    if item[0] == "b":
        x = item[1]
        out.append(x if isinstance(x, str) else "0x%02x" % x)
        n += 1
    elif item[0] == "br":
        off = (where[item[2]] - (n + 3)) & 0xFFFF
        lo, hi = "0x%02x" % (off & 0xFF), "0x%02x" % (off >> 8)
        # (A 2-byte operand is in the target's byte order: s390x is big-endian.)
        out += ["0x%02x" % item[1]] + ([hi, lo] if ARCH == "s390x" else [lo, hi])
        n += 3
rows = [", ".join(out[i:i + 12]) for i in range(0, len(out), 12)]
print("    .cfi_escape 0x10, %d, %d, %s" % (RA_COLUMN, n, rows[0]))
for r in rows[1:]:
    print("    .cfi_escape " + r)
