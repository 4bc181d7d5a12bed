//! Whole transaction lifecycles through the coordinator.
