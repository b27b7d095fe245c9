"""Kafka's next-generation consumer groups (KIP-848): the coordinator assigns and reconciles."""
