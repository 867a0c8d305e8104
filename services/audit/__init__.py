"""Audit: replays a decision log and re-derives every decision from the state it was based on."""
