//! `runner validate M`: parse and check a manifest; every problem at once.

use super::{EXIT_OK, Ui, load};
use std::path::Path;

pub fn run(ui: &Ui, path: &Path) -> i32 {
    let loaded = match load(ui, path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    // A repository glob that matches nothing is not wrong, but rarely meant.
    for w in crate::plan::repos::locate_noting(&loaded).1 {
        ui.warn(w);
    }
    let m = &loaded.manifest;
    outln!(
        "`{}` is valid: manifest `{}`, {} repositor{}, {} item{}, {} discovery rule{}",
        loaded.display_path,
        m.name,
        m.repositories.len(),
        if m.repositories.len() == 1 {
            "y"
        } else {
            "ies"
        },
        m.items.len(),
        if m.items.len() == 1 { "" } else { "s" },
        m.discover.len(),
        if m.discover.len() == 1 { "" } else { "s" },
    );
    EXIT_OK
}
