//! The exported names of libc's process and loader entry points that instrfn wraps on glibc:
//! naked functions that jump to the wrappers in src/runtime/interpose.c (a cdylib exports only symbols
//! rustc defines, and a naked function is never instrumented). The jump keeps every register
//! and the stack as the caller left them, variadic arguments included.
//!
//! `dlopen` and `dlmopen` first ask a route function of src/runtime/interpose.c where to go, then jump
//! there with every argument register, the stack and the return address as the caller left
//! them: the loader takes the object that called dlopen from that return address (its
//! library search path, `$ORIGIN`, its namespace), so a call the wrapper cannot make on the
//! caller's behalf goes straight to libc's function, as if unwrapped.

macro_rules! interposers {
    (
        $($name:ident => $c:ident),* $(,)?;
        routed: $($rname:ident => $route:ident),* $(,)?
    ) => {
        unsafe extern "C" {
            $(fn $c();)*
            $(fn $route();)*
        }
        $(
            #[unsafe(naked)]
            #[unsafe(no_mangle)]
            /// Wraps libc's function of this name (src/runtime/interpose.c).
            pub unsafe extern "C" fn $name() {
                tail_call!($c)
            }
        )*
        $(
            #[unsafe(naked)]
            #[unsafe(no_mangle)]
            /// Wraps libc's function of this name (src/runtime/interpose.c): continues at the function
            /// the route chooses, called as if from the original caller.
            pub unsafe extern "C" fn $rname() {
                routed_jump!($route)
            }
        )*
        /// Makes the linker keep the wrappers: called by the load-time constructor, so
        /// wherever the runtime is linked, the object that defines them is too.
        pub fn keep_linked() {
            $(core::hint::black_box($name as *const () as usize);)*
            $(core::hint::black_box($rname as *const () as usize);)*
        }
    };
}

interposers! {
    execve => instrfn_c_execve,
    execv => instrfn_c_execv,
    execvp => instrfn_c_execvp,
    execvpe => instrfn_c_execvpe,
    execl => instrfn_c_execl,
    execle => instrfn_c_execle,
    execlp => instrfn_c_execlp,
    fexecve => instrfn_c_fexecve,
    execveat => instrfn_c_execveat,
    posix_spawn => instrfn_c_posix_spawn,
    posix_spawnp => instrfn_c_posix_spawnp,
    dlclose => instrfn_c_dlclose,
    sigaction => instrfn_c_sigaction,
    _Unwind_RaiseException => instrfn_c__Unwind_RaiseException,
    _Unwind_Resume => instrfn_c__Unwind_Resume,
    _Unwind_Resume_or_Rethrow => instrfn_c__Unwind_Resume_or_Rethrow,
    _Unwind_ForcedUnwind => instrfn_c__Unwind_ForcedUnwind,
    _Unwind_Backtrace => instrfn_c__Unwind_Backtrace,
    backtrace => instrfn_c_backtrace,
    __cxa_begin_catch => instrfn_c___cxa_begin_catch,
    unshare => instrfn_c_unshare,
    setns => instrfn_c_setns;
    routed:
    dlopen => instrfn_c_dlopen_route,
    dlmopen => instrfn_c_dlmopen_route,
}
