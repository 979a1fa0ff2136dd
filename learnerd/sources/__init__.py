"""What feeds the queues besides the reconcilers' own watches: the ``.dlm`` file watch, the training intake
(watch, debounce, probe inbox), the backfill job and the cycle ETA."""
