"""What learnerd refuses to learn: secrets are redacted before anything is stored (:mod:`.redact`), and
dangerous commands and prompt injections never become examples (:mod:`.policy`). Configured in
``[privacy]`` (:mod:`.settings`); docs/privacy.md says what is stored where."""
