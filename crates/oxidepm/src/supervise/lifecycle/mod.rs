//! The lifecycle of an app: which status follows which, for every request,
//! exit, timer, verdict and limit.

#[cfg(test)]
mod tests;
