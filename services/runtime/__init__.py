"""The shell every log-following service shares: consume the log, fold, decide, append, snapshot."""
