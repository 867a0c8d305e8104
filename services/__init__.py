"""The services: each a pure ``policy`` module (decide) and a thin shell (Kafka in, Kafka out).

Policy modules import only the standard library, msgspec and ``gangway.events``.
"""
