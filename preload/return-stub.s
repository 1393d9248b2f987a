# libinstrfn-return-stub.so: a `__return__` that returns at once, for programs built with
# `gcc -pg -mfentry -minstrument-return=call` (glibc defines no `__return__`). Built by
#   cc -shared -nostdlib -Wl,-soname,libinstrfn-return-stub.so \
#       -o libinstrfn-return-stub.so preload/return-stub.s
# A program linked against it runs without instrfn. Preloaded (`instrfn record`), the runtime
# comes first in the symbol lookup order, so its `__return__` takes the calls.
    .text
    .globl __return__
    .type __return__,@function
__return__:
    .cfi_startproc
    ret
    .cfi_endproc
    .size __return__, .-__return__
    .section .note.GNU-stack,"",@progbits
