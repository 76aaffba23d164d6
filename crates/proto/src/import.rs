//! What `oxidepm --json import` prints: an app file as the specs `start`
//! would send. Container mode runs the CLI to read an app file and takes
//! this back, so the daemon links no app-file parser.

/// The apps of an imported file, and the notes `start` would print.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Imported {
    /// The apps, resolved and validated.
    pub apps: Vec<crate::AppSpec>,
    /// Settings without an exact equivalent, one line each.
    pub notes: Vec<String>,
}
