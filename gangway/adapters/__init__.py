"""Adapters: where gangway talks to other systems. The rule, as kept and as `.importlinter` checks it:

- **Kafka** (aiokafka): only here (``kafka.py``); the outside clients the tests use (confluent-kafka,
  faust) are never imported by the package.
- **Processes** (subprocess): only here (``processes.py``; ``broker.py`` starts the embedded broker with it).
- **Kubernetes** (kubernetes_asyncio): only here, once the binder for a real cluster exists.
- **SQL** (sqlalchemy): here and in the accounting ledger (``services/accounting/ledger.py``), which
  owns its tables and its one-transaction writes.

Not the adapters' business: files (the state directory, config files and logs are read and written
where they are used: the shells, the stack, the CLI), YAML (a parser, allowed where files are read:
the contract loader, submission manifests, the binder's cluster file, the JSON Schema writer, the
benchmarks) and the clock (``services/runtime/clock.py``). ``gangway.events`` and every service's
``policy.py`` stay pure: none of the above, directly or not.
"""
