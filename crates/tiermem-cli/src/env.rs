//! `tiermem env`: every `TIERMEM_*` variable as a Markdown table, printed
//! from the option table (`tiermem::config::options`).

pub fn run() -> Result<(), String> {
    print!("{}", tiermem::config::options::markdown());
    Ok(())
}
