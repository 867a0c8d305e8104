"""The language of gangway: event types, the contract, the state and the fold.

Rule of this package: purely data and computation. It imports only the standard library and
msgspec — never aiokafka, faust, sqlalchemy, kubernetes_asyncio, nor any I/O. A test keeps it so.
"""
