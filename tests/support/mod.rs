//! Shared code for integration tests. Declare it in a test file with `mod support;`.
pub mod audit;
pub mod failures;
pub mod fleet;
pub mod helm;
pub mod hub;
pub mod placement;
pub mod process;
pub mod watchdog;
