"""Isolated, high-throughput Python code executor ("code judge")."""
