//! Socket activation: listeners handed over by systemd (or `systemd-socket-activate`) through
//! `LISTEN_FDS`/`LISTEN_PID`, for `--container-runtime-endpoint fd://`.
