"""What the gateway tells about itself: logs, metrics, traces, and the last hour of stats."""
