//! `tessera completions SHELL`: the shell completion script, generated from the command-line definition
//! itself, so it always matches the installed `tessera`.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Arguments of `tessera completions`.
#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Writes the completion script of command-line definition `C` for the shell asked for to stdout; it cannot
/// fail (`clap_complete` panics should stdout refuse the script, as `println!` does).
pub fn run<C: CommandFactory>(args: CompletionsArgs) {
    let mut command = C::command();
    clap_complete::generate(args.shell, &mut command, "tessera", &mut std::io::stdout());
}
