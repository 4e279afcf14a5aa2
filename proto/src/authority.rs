//! Accepting any HTTP/2 `:authority` on the CRI sockets (see the module's functions).
