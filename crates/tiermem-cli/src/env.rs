//! `tiermem env`: the TIERMEM_* environment variables as a Markdown table.

pub fn run() -> Result<(), String> {
    print!("{}", tiermem::config::env_reference_markdown());
    Ok(())
}
