//! Where the instructions from a function's entry to its counting call put the return address
//! (trace mode's slot rule). Pure code over the bytes: no memory is read but `code`.
//!
//! The call that returns to `self_pc` is `auipc ra; jalr ra, lo(ra)` (`call`), `jal ra` (a
//! relaxed `call`), `jalr ra, lo(rs)` or `c.jalr rs`. The function's entry, where sp is the CFA
//! and ra the return address, is a position from which every instruction up to that call
//! decodes, in a straight line, to one of the kinds a prologue and the scheduled start of a
//! body consist of (the scheduler mixes them: gcc loads the constant of a two-step frame
//! before its first sp move, saves registers after moves of arguments):
//! - sp moved by a constant (`addi`, `c.addi16sp`, `add`/`sub sp, sp, r` with r a constant
//!   from `li`/`lui`/`addi(w)`), never below its 16-byte alignment at the call;
//! - stores whose address is known relative to the CFA (base sp, or a register set from sp,
//!   such as the frame pointer);
//! - loads, ALU and FP operations, moves, `auipc`, `lui`: anything that writes a register other
//!   than sp and no memory;
//! - nothing else: no branch, jump, call, system, atomic or CSR instruction, no store through an
//!   unknown address (it might hit the slot).
//!
//! The entry ra (tracked through moves) must have been stored, 8 bytes, at CFA - 8 (sp at the
//! entry), and not overwritten. sp at the entry is the CFA unless the entry is preceded by more
//! of the prologue: the instruction before it must not move sp down (either reading of the
//! bytes before it, 2 or 4 bytes long). A prologue that calls `__riscv_save_N` (`-msave-restore`)
//! stores no ra itself, so it never decodes. Instruction boundaries are found by trying every
//! even start in the window: every start that decodes must agree, or the site has no rule.

/// The bytes before the call that are looked at.
pub const WINDOW: usize = 320;

/// What the code from the entry to the call proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The return slot (CFA - 8) minus sp at the call.
    pub slot: usize,
    /// a0 holds the entry ra at the call (gcc's `mv a0, ra`).
    pub a0_is_ra: bool,
    /// s0 holds the CFA at the call (a frame pointer).
    pub s0_is_cfa: bool,
}

/// A register's value as far as the decoder knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Unknown,
    Const(i64),
    /// The CFA plus this.
    Cfa(i64),
    /// The return address the function was entered with.
    EntryRa,
}

/// The decoder's state along one straight line of instructions.
struct State {
    x: [Val; 32],
    /// CFA - 8 holds the entry ra.
    slot_ok: bool,
}

const SP: usize = 2;
const A0: usize = 10;
const S0: usize = 8;

impl State {
    /// The state at the function's entry.
    fn new() -> State {
        let mut x = [Val::Unknown; 32];
        x[0] = Val::Const(0);
        x[1] = Val::EntryRa;
        x[SP] = Val::Cfa(0);
        State { x, slot_ok: false }
    }

    /// Writes `v` to register `rd`; false if that breaks the model (sp not relative to the
    /// CFA any more).
    fn write(&mut self, rd: usize, v: Val) -> bool {
        match rd {
            0 => true,
            SP => {
                self.x[SP] = v;
                matches!(v, Val::Cfa(_))
            }
            _ => {
                self.x[rd] = v;
                true
            }
        }
    }

    /// A store of `width` bytes of `v` at `imm(base)`; false if its address is unknown.
    fn store(&mut self, base: usize, imm: i64, width: i64, v: Val) -> bool {
        let Val::Cfa(b) = self.x[base] else {
            return false;
        };
        let at = b.wrapping_add(imm);
        if width == 8 && at == -8 && v == Val::EntryRa {
            self.slot_ok = true;
        } else if at < 0 && at + width > -8 {
            self.slot_ok = false;
        }
        true
    }

    fn add(&self, rs: usize, imm: i64) -> Val {
        match self.x[rs] {
            Val::Const(c) => Val::Const(c.wrapping_add(imm)),
            Val::Cfa(c) => Val::Cfa(c.wrapping_add(imm)),
            Val::EntryRa if imm == 0 => Val::EntryRa,
            _ => Val::Unknown,
        }
    }

    fn addw(&self, rs: usize, imm: i64) -> Val {
        match self.x[rs] {
            Val::Const(c) => Val::Const(c.wrapping_add(imm) as i32 as i64),
            _ => Val::Unknown,
        }
    }

    /// rs1 + rs2 (`sub`: rs1 - rs2).
    fn add_reg(&self, rs1: usize, rs2: usize, sub: bool) -> Val {
        match (self.x[rs1], self.x[rs2]) {
            (Val::Const(a), Val::Const(b)) if sub => Val::Const(a.wrapping_sub(b)),
            (Val::Const(a), Val::Const(b)) => Val::Const(a.wrapping_add(b)),
            (Val::Cfa(a), Val::Const(b)) if sub => Val::Cfa(a.wrapping_sub(b)),
            (Val::Cfa(a), Val::Const(b)) => Val::Cfa(a.wrapping_add(b)),
            (Val::Const(a), Val::Cfa(b)) if !sub => Val::Cfa(a.wrapping_add(b)),
            (v, Val::Const(0)) => v,
            (Val::Const(0), v) if !sub => v,
            _ => Val::Unknown,
        }
    }

    fn shl(&self, rs: usize, sh: u32) -> Val {
        match self.x[rs] {
            Val::Const(c) => Val::Const(c.wrapping_shl(sh)),
            _ => Val::Unknown,
        }
    }
}

fn half(code: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(code.get(at..at + 2)?.try_into().ok()?))
}

fn word(code: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(code.get(at..at + 4)?.try_into().ok()?))
}

/// The sign-extended `bits`-bit value `v`.
fn sext(v: u32, bits: u32) -> i64 {
    ((v << (32 - bits)) as i32 >> (32 - bits)) as i64
}

/// Applies one 32-bit instruction; false if it is not one of the modelled kinds.
fn step32(st: &mut State, w: u32) -> bool {
    let rd = ((w >> 7) & 31) as usize;
    let f3 = (w >> 12) & 7;
    let rs1 = ((w >> 15) & 31) as usize;
    let rs2 = ((w >> 20) & 31) as usize;
    let f7 = w >> 25;
    let imm_i = sext(w >> 20, 12);
    let imm_s = sext((w >> 25) << 5 | (w >> 7) & 31, 12);
    match w & 0x7f {
        0x03 if f3 != 7 => st.write(rd, Val::Unknown), // loads
        0x07 if f3 == 2 || f3 == 3 => true,            // flw, fld
        0x13 => {
            let v = match f3 {
                0 => st.add(rs1, imm_i),                               // addi
                1 if w >> 26 == 0 => st.shl(rs1, (imm_i & 63) as u32), // slli
                _ => Val::Unknown,
            };
            st.write(rd, v)
        }
        0x17 | 0x37 => {
            let v = if w & 0x7f == 0x37 {
                Val::Const((w & 0xffff_f000) as i32 as i64) // lui
            } else {
                Val::Unknown // auipc
            };
            st.write(rd, v)
        }
        0x1b => {
            let v = if f3 == 0 {
                st.addw(rs1, imm_i) // addiw
            } else {
                Val::Unknown
            };
            st.write(rd, v)
        }
        0x23 if f3 <= 3 => st.store(rs1, imm_s, 1 << f3, st.x[rs2]), // sb, sh, sw, sd
        0x27 if f3 == 2 || f3 == 3 => st.store(rs1, imm_s, 1 << f3, Val::Unknown), // fsw, fsd
        0x33 => {
            let v = match (f7, f3) {
                (0, 0) => st.add_reg(rs1, rs2, false),   // add
                (0x20, 0) => st.add_reg(rs1, rs2, true), // sub
                (0 | 0x20 | 1, _) => Val::Unknown,       // other ALU, M extension
                _ => return false,
            };
            st.write(rd, v)
        }
        0x3b => st.write(rd, Val::Unknown), // OP-32
        0x43 | 0x47 | 0x4b | 0x4f => true,  // fused multiply-add (FP rd)
        0x53 => match w >> 27 {
            // compare, convert to integer, move to integer / classify: an integer rd
            0x14 | 0x18 | 0x1c => st.write(rd, Val::Unknown),
            _ => true,
        },
        _ => false,
    }
}

/// Applies one compressed instruction (RV64C); false if it is not one of the modelled
/// kinds.
fn step16(st: &mut State, h: u16) -> bool {
    let h = h as u32;
    let f3 = h >> 13;
    let rd = ((h >> 7) & 31) as usize;
    let rs2 = ((h >> 2) & 31) as usize;
    let rdp = (((h >> 2) & 7) + 8) as usize; // rd' / rs2' in bits 4:2
    let rs1p = (((h >> 7) & 7) + 8) as usize; // rs1' / rd' in bits 9:7
    let imm6 = sext((h >> 12 & 1) << 5 | (h >> 2) & 31, 6);
    // c.ld/c.sd/c.fld/c.fsd offsets: uimm[5:3] = 12:10, uimm[7:6] = 6:5
    let uimm_d = ((h >> 10) & 7) << 3 | ((h >> 5) & 3) << 6;
    // c.lw/c.sw: uimm[5:3] = 12:10, uimm[2] = 6, uimm[6] = 5
    let uimm_w = ((h >> 10) & 7) << 3 | ((h >> 6) & 1) << 2 | ((h >> 5) & 1) << 6;
    match (h & 3, f3) {
        (0, 0) => {
            // c.addi4spn rd', sp, nzuimm[5:4|9:6|2|3]
            let imm = ((h >> 11) & 3) << 4
                | ((h >> 7) & 15) << 6
                | ((h >> 6) & 1) << 2
                | ((h >> 5) & 1) << 3;
            imm != 0 && st.write(rdp, st.add(SP, imm as i64))
        }
        (0, 1) => true,                                           // c.fld
        (0, 2) | (0, 3) => st.write(rdp, Val::Unknown),           // c.lw, c.ld
        (0, 5) => st.store(rs1p, uimm_d as i64, 8, Val::Unknown), // c.fsd
        (0, 6) => st.store(rs1p, uimm_w as i64, 4, st.x[rdp]),    // c.sw
        (0, 7) => st.store(rs1p, uimm_d as i64, 8, st.x[rdp]),    // c.sd
        (1, 0) => st.write(rd, st.add(rd, imm6)),                 // c.addi, c.nop
        (1, 1) => rd != 0 && st.write(rd, st.addw(rd, imm6)),     // c.addiw
        (1, 2) => st.write(rd, Val::Const(imm6)),                 // c.li
        (1, 3) if rd == SP => {
            // c.addi16sp: nzimm[9] = 12, nzimm[4|6|8:7|5] = 6:2
            let imm = (h >> 12 & 1) << 9
                | ((h >> 6) & 1) << 4
                | ((h >> 5) & 1) << 6
                | ((h >> 3) & 3) << 7
                | ((h >> 2) & 1) << 5;
            imm != 0 && st.write(SP, st.add(SP, sext(imm, 10)))
        }
        (1, 3) => imm6 != 0 && st.write(rd, Val::Const(imm6 << 12)), // c.lui
        (1, 4) => st.write(rs1p, Val::Unknown), // c.srli, c.srai, c.andi, c.sub, ...
        (2, 0) => st.write(rd, st.shl(rd, (imm6 & 63) as u32)), // c.slli
        (2, 1) => true,                         // c.fldsp
        (2, 2) | (2, 3) => rd != 0 && st.write(rd, Val::Unknown), // c.lwsp, c.ldsp
        (2, 4) => {
            let bit12 = h >> 12 & 1;
            match (bit12, rs2) {
                (_, 0) => false,                               // c.jr, c.jalr, c.ebreak
                (0, _) => st.write(rd, st.x[rs2]),             // c.mv
                _ => st.write(rd, st.add_reg(rd, rs2, false)), // c.add
            }
        }
        (2, 5) => {
            // c.fsdsp: uimm[5:3] = 12:10, uimm[8:6] = 9:7
            let imm = ((h >> 10) & 7) << 3 | ((h >> 7) & 7) << 6;
            st.store(SP, imm as i64, 8, Val::Unknown)
        }
        (2, 6) => {
            // c.swsp: uimm[5:2] = 12:9, uimm[7:6] = 8:7
            let imm = ((h >> 9) & 15) << 2 | ((h >> 7) & 3) << 6;
            st.store(SP, imm as i64, 4, st.x[rs2])
        }
        (2, 7) => {
            // c.sdsp: uimm[5:3] = 12:10, uimm[8:6] = 9:7
            let imm = ((h >> 10) & 7) << 3 | ((h >> 7) & 7) << 6;
            st.store(SP, imm as i64, 8, st.x[rs2])
        }
        _ => false,
    }
}

/// The immediate of `addi sp, sp, imm` (or `c.addi16sp`, `c.addi sp`) at `at`, and the
/// instruction's length, if that is what is there and it moves sp down.
fn sp_down(code: &[u8], at: usize) -> Option<(i64, usize)> {
    let h = half(code, at)?;
    if h & 3 == 3 {
        let w = word(code, at)?;
        let imm = sext(w >> 20, 12);
        return (w & 0xf_ffff == 0x1_0113 && imm < 0).then_some((imm, 4));
    }
    let mut st = State::new();
    let is_sp = (h & 0xef83) == 0x6101 || (h & 0xef83) == 0x0101; // c.addi16sp, c.addi sp
    if !is_sp || !step16(&mut st, h) {
        return None;
    }
    match st.x[SP] {
        Val::Cfa(d) if d < 0 => Some((d, 2)),
        _ => None,
    }
}

/// Whether the instruction of `len` bytes at `at` may move sp down: `addi sp, sp, -N`
/// (`c.addi16sp`, `c.addi sp`), or `add`/`sub sp, sp, r` (`c.add sp, r`).
fn moves_sp_down(code: &[u8], at: usize, len: usize) -> bool {
    if sp_down(code, at).is_some_and(|(_, l)| l == len) {
        return true;
    }
    if len == 2 {
        let h = half(code, at).unwrap_or(0);
        return h & 0xff83 == 0x9102 && h & 0x7c != 0; // c.add sp, rs2
    }
    let w = word(code, at).unwrap_or(0);
    // add/sub sp, sp, rs2: opcode OP, rd = rs1 = sp, funct3 0, funct7 0 or 0x20
    w & 0xbe0f_ffff == 0x0001_0133
}

/// Decodes from the entry candidate at `entry` to the call at `call`: the frame, if the
/// straight line reaches the call exactly and proves the slot.
fn run(code: &[u8], entry: usize, call: usize) -> Option<Frame> {
    let mut st = State::new();
    let mut at = entry;
    while at < call {
        let h = half(code, at)?;
        if h & 3 == 3 {
            if !step32(&mut st, word(code, at)?) {
                return None;
            }
            at += 4;
        } else {
            if !step16(&mut st, h) {
                return None;
            }
            at += 2;
        }
    }
    let Val::Cfa(sp) = st.x[SP] else {
        return None;
    };
    if at != call || !st.slot_ok || sp > -16 || sp % 16 != 0 {
        return None;
    }
    Some(Frame {
        slot: (-8 - sp) as usize,
        a0_is_ra: st.x[A0] == Val::EntryRa,
        s0_is_cfa: st.x[S0] == Val::Cfa(0),
    })
}

/// The frame of the counting call that returns to `self_pc`, from `code` = the bytes
/// `[base, self_pc)`; None unless every reading of the bytes that decodes agrees.
pub fn decode(code: &[u8], base: usize, self_pc: usize) -> Option<Frame> {
    if self_pc.checked_sub(base)? != code.len() || code.len() < 2 || !base.is_multiple_of(2) {
        return None;
    }
    let end = code.len();
    let mut calls = [None; 3];
    if end >= 8
        && word(code, end - 8)? & 0xfff == 0x097
        && word(code, end - 4)? & 0xf_ffff == 0x0_80e7
    {
        calls[0] = Some(end - 8); // auipc ra; jalr ra, lo(ra)
    }
    if end >= 4 {
        let w = word(code, end - 4)?;
        if w & 0xfff == 0x0ef || w & 0x7fff == 0x0e7 {
            calls[1] = Some(end - 4); // jal ra; jalr ra, lo(rs)
        }
    }
    let h = half(code, end - 2)?;
    if h & 0xf07f == 0x9002 && (h >> 7) & 31 != 0 {
        calls[2] = Some(end - 2); // c.jalr rs
    }
    let first = end.saturating_sub(WINDOW);
    let mut found: Option<Frame> = None;
    for call in calls.into_iter().flatten() {
        let mut entry = call;
        while entry >= first + 2 {
            entry -= 2;
            if entry % 2 != 0 {
                continue;
            }
            let Some(frame) = run(code, entry, call) else {
                continue;
            };
            // What comes before the entry (`code` starts at its mapping's start when
            // it holds fewer than WINDOW + 4 bytes: then there may be nothing before).
            let moved_before = entry >= 2 && moves_sp_down(code, entry - 2, 2)
                || entry >= 4 && moves_sp_down(code, entry - 4, 4);
            if moved_before {
                return None;
            }
            match found {
                Some(f) if f != frame => return None,
                _ => found = Some(frame),
            }
        }
    }
    found
}
