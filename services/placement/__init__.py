"""Placement: puts each admitted gang on nodes, whole or not at all."""
