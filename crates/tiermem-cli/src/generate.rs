//! `tiermem completions <shell>` and the hidden `tiermem generate man DIR`:
//! shell completions and man pages made from the command's own clap
//! definition, so that they cannot drift from it (scripts/install.sh
//! installs both); and the hidden `tiermem generate configuration FILE`,
//! which rewrites the option table of docs/configuration.md from the
//! library's (`tiermem::config::options`).

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
    /// Rewrites the generated table of FILE (docs/configuration.md),
    /// between its two marker lines, from the option table; the rest of
    /// the file is kept.
    Configuration {
        /// The file (docs/configuration.md).
        file: PathBuf,
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
        Generate::Configuration { file } => {
            let doc = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let new = tiermem::config::options::splice_markdown(&doc)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            if new != doc {
                std::fs::write(&file, new).map_err(|e| format!("{}: {e}", file.display()))?;
            }
            Ok(())
        }
    }
}
