"""A fleet of ``learnerd run`` replicas sharing one PostgreSQL database (docs/fleet.md).

:mod:`~learnerd.fleet.ownership` decides which live replica owns a key (rendezvous hashing);
:mod:`~learnerd.fleet.membership` keeps the ``replicas`` table's heartbeat leases;
:mod:`~learnerd.fleet.notify` carries keys and vector changes between replicas over LISTEN/NOTIFY;
:mod:`~learnerd.fleet.ledger` records adapter commits and promotions in the database;
:mod:`~learnerd.fleet.fleet` wires them to the daemon's queues, reconcilers and vector index.
"""
