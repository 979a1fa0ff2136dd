"""What feeds the queues besides the reconcilers' own watches: the ``.dlm`` file watch, the training intake
(watch, debounce, probe inbox), the backfill job, the cycle ETA, and learnerd's own served answers (recorded as
suggestions, :mod:`.served_answers`)."""
