"""The generic controller runtime: client-go-style workqueues, the controller and its metrics, the reconcile
contract, debounce, progress with an ETA, and rate-limited logging of repeated events. It imports nothing else
of learnerd."""
