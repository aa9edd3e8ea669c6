"""Fan-out of live events to a task's streaming clients: in process, or across replicas."""
