"""Wiring and lifecycle: the controller table (the reconcilers' specs), the composed config, the daemon that
builds and runs them (start-up resync, drain, signals, reload, state-dir lock, sd_notify, logging) and the
control facade the HTTP surfaces call. No domain logic lives here."""
