"""Runtime machinery with no domain knowledge: workqueue, controllers, wiring, servers, file watch."""
