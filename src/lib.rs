//! muster: queue, quota and gang-dispatch distributed training jobs from a hub cluster to member
//! clusters. The scheduling core (`quantity`, `resources`, `workload`, `quota`, `queue`, `fleet`,
//! `estimate`, `scheduler`) is pure and deterministic; `sim` drives it from a scenario file;
//! `metrics` exposes what drivers see and do to Prometheus.

pub mod alloc;
pub mod controller;
pub mod estimate;
pub mod fleet;
pub mod forecast;
pub mod labels;
pub mod lifecycle;
pub mod metrics;
pub mod placement;
pub mod quantity;
pub mod queue;
pub mod quota;
pub mod resources;
pub mod runtime;
pub mod scheduler;
pub mod sim;
pub mod topology;
pub mod whatif;
pub mod workload;
