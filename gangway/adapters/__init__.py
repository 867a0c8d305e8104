"""Adapters: where gangway talks to other systems. The rule, as kept and as `.importlinter` checks it:

- **Kafka**: only here — aiokafka in ``kafka.py`` (every client, with the connection settings of
  ``KafkaSettings``), confluent-kafka's admin client in ``kafka_acls.py`` (ACLs); faust only in
  ``examples/`` and the tests.
- **Processes** (subprocess): only here (``processes.py``; ``broker.py`` and ``apache_kafka.py``
  launch brokers, ``archive.py`` is the archiver); the one exception is the durability benchmark,
  which starts and kill -9s a writer process of its own.
- **Kubernetes** (kubernetes_asyncio): only in ``kubernetes/``.
- **SQL** (sqlalchemy): here and in the accounting ledger (``services/accounting/ledger.py``), which
  owns its tables and its one-transaction writes; the money benchmark times the ledger's engines.

Not the adapters' business: files (the state directory, config files and logs are read and written
where they are used: the shells, the stack, the CLI), YAML (a parser, allowed where files are read:
the contract loader, submission manifests, the binder's cluster file, the topics file, the JSON
Schema writer, the benchmarks) and the clock (``services/runtime/clock.py``). ``gangway.events``
and every service's ``policy.py`` stay pure: none of the above, directly or not.
"""
