//! `tiermem completions <shell>` and the hidden `tiermem generate man DIR`:
//! shell completions and man pages made from the command's own clap
//! definition, so that they cannot drift from it (scripts/install.sh
//! installs both).

use clap::Subcommand;
use std::path::PathBuf;

/// Generated files (for scripts/install.sh).
#[derive(Subcommand)]
pub enum Generate {
    /// One man page per command and subcommand (tiermem.1,
    /// tiermem-run.1, tiermem-bench-stencil.1, ...) into DIR.
    Man {
        /// The directory (created when missing).
        dir: PathBuf,
    },
}

/// Prints the completion script for `shell`.
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) -> Result<(), String> {
    let name = cmd.get_name().to_owned();
    clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
    Ok(())
}

pub fn run(cmd: clap::Command, g: Generate) -> Result<(), String> {
    match g {
        Generate::Man { dir } => {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            // Hidden commands (this one) get no page.
            clap_mangen::generate_to(cmd, &dir)
                .map_err(|e| format!("writing man pages into {}: {e}", dir.display()))
        }
    }
}
