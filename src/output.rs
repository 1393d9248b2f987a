//! The one dispatch between the outputs: gmon mode (crate::gmon, with the pc sampler), and
//! trace mode (crate::trace, with native XRay patching, crate::xray). The runtime asks here;
//! this file decides which output answers. Uses `config`, `abi`, `thread` and the outputs.

use core::ffi::c_int;

use crate::abi::{self, Mode, Tls};
use crate::config::Config;
use crate::gmon::{self, sampler};
use crate::sys::objects::Module;
use crate::thread::ThreadBlock;
use crate::{arch, trace, xray};

/// At load, when INSTRFN_MODE=trace: XRay sleds have no counting call to start the runtime
/// lazily from, so they are patched now, and their first call starts it.
pub fn on_load(config: &Config) {
    if config.trace {
        xray::on_load(config);
        trace::returns::note_objects();
    }
}

/// Starts the output the configuration asks for: trace mode if this architecture has its
/// trampolines and the files can be made (else gmon mode, said in one line), or gmon mode.
/// Returns the mode the fast paths now take.
pub fn start(config: &Config) -> Mode {
    if config.trace && start_tracing(config) {
        // (trace::start chose TraceEntries if return addresses are not to be replaced)
        if abi::mode() == Mode::Gmon {
            abi::set_mode(Mode::Trace);
        }
        if abi::mode() == Mode::TraceEntries {
            xray::exits_off();
        }
        trace::returns::note_objects();
    } else {
        abi::set_mode(Mode::Gmon);
        xray::disable();
    }
    abi::mode()
}

/// gmon mode's pc sampler (INSTRFN_HZ), running if recording starts on.
pub fn start_sampling(config: &Config) {
    if !abi::mode().traces() && config.hz > 0 && sampler::start(config.hz) && config.start {
        sampler::resume();
    }
}

fn start_tracing(config: &Config) -> bool {
    if !arch::TRACE_SUPPORTED {
        message!("INSTRFN_MODE=trace is not available on this architecture yet; writing gmon.out");
        return false;
    }
    trace::collector::configure(config.collector, config.collector_nice);
    trace::configure_filters(config.depth, config.min_duration_ns, config.call_words);
    trace::trigger::configure(config.triggers(), config.trigger_limit);
    let chunk = match trace::ring::configure(config.ring, config.exit_snapshot) {
        0 => config.bufsize,
        ring_chunk => ring_chunk,
    };
    let depth = if config.depth > 0 {
        config.depth
    } else {
        config.max_depth
    };
    let ok = trace::start(
        config.output(),
        chunk,
        config.trace_limit,
        depth,
        config.exits,
    );
    if !ok {
        abi::set_mode(Mode::Gmon);
    }
    ok
}

/// A thread has claimed `block` (its first call): its sampling timer, its trace.
pub fn thread_started(tls: &mut Tls, block: &ThreadBlock) {
    sampler::thread_started(&block.timer);
    trace::thread_started(tls, block);
}

/// The thread that owns `block` is exiting.
pub fn thread_ended(tls: &mut Tls, block: &ThreadBlock) {
    trace::thread_ended(tls, block);
}

/// Recording goes on or off (instrfn_start/stop, moncontrol): the XRay sleds are patched
/// first and unpatched last (unless INSTRFN_XRAY_STOP=pause), the sampling timers follow.
pub fn recording(on: bool) {
    if on {
        xray::recording(true);
        abi::set_recording(true);
        sampler::resume();
    } else {
        abi::set_recording(false);
        xray::recording(false);
        sampler::pause();
    }
}

/// At exit: the trace's last lines, or every gmon profile.
pub fn finish(config: &Config, exe: &Module) {
    if trace::active() {
        trace::finish();
    } else {
        gmon::write(config, exe, false);
    }
}

/// Before exec: as [`finish`], but no gmon.out for a process that recorded `nothing` (a fork
/// child on its way to exec). Returns whether something was written.
pub fn before_exec(config: &Config, exe: &Module, nothing: bool) -> bool {
    if trace::active() {
        trace::finish();
        true
    } else {
        !nothing && gmon::write(config, exe, false) == 0
    }
}

/// Stops the sampling timers (before exec); returns whether they ran.
pub fn pause_sampling() -> bool {
    let was_running = sampler::running();
    sampler::pause();
    was_running
}

/// Starts the sampling timers again (the exec failed).
pub fn resume_sampling() {
    sampler::resume();
}

/// `instrfn_flush`: the trace's pending lines and a sync, or gmon.out written now. Returns 0
/// or an errno value.
pub fn flush(config: &Config, exe: &Module) -> c_int {
    if trace::active() {
        trace::flush()
    } else {
        gmon::write(config, exe, false)
    }
}

/// gmon.out now (`instrfn_write_gmon`, the dump signal), whatever the mode.
pub fn write_gmon(config: &Config, exe: &Module) -> c_int {
    gmon::write(config, exe, false)
}

/// The program crashed: a snapshot of the rings in ring mode, else gmon.out, if another
/// writer does not hold it for too long.
pub fn write_on_crash(config: &Config, exe: &Module) {
    if trace::active() && trace::ring::on() {
        trace::ring::snapshot(b"crash");
    } else {
        gmon::write_on_crash(config, exe);
    }
}

/// A snapshot of the rings now (`instrfn_snapshot`, the snapshot signal): 0, or an errno
/// value (EINVAL: not ring mode).
pub fn snapshot(reason: &[u8]) -> c_int {
    if trace::active() {
        trace::ring::snapshot(reason)
    } else {
        libc::EINVAL
    }
}

/// Before dlclose of a loaded object: the trace notes what is loaded (its `module` lines), or
/// gmon keeps room for the object's counts.
pub fn before_unload() {
    if trace::active() {
        trace::meta::note_modules();
    } else {
        gmon::prepare_unload();
    }
}

/// After dlclose unloaded `m`: an `unload` line, or its profile written and its counts kept
/// apart.
pub fn after_unload(config: &Config, m: &Module) {
    if trace::active() {
        trace::returns::forget(m);
        trace::meta::module_unloaded(m);
    } else {
        gmon::write_unloaded(config, m);
    }
}

/// After a dlopen that loaded objects (trace mode): their sleds patched, their lines written,
/// those that call gcc's `__return__` on its route.
pub fn opened() {
    trace::returns::note_objects();
    trace::meta::note_opened();
}

/// Ends the collector thread for unshare/setns; whether it is gone.
pub fn collector_pause() -> bool {
    trace::collector::pause()
}

/// The collector again after [`collector_pause`].
pub fn collector_resume() {
    trace::collector::resume();
}

/// In a fork child, first: a writer that was running on another thread of the parent does
/// not exist here; its lock is free.
pub fn reset_writer_after_fork() {
    gmon::reset_after_fork();
}

/// In a fork child: its own timer and counts, its own trace.
pub fn after_fork(config: &Config, current: *mut ThreadBlock) {
    sampler::reset_after_fork(current);
    trace::after_fork(config.output());
}
