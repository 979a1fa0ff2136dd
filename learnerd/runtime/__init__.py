"""The generic controller runtime: client-go-style workqueues, the controller, the reconcile contract and
debounce. It imports nothing else of learnerd."""
