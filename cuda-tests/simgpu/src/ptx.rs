//! Just enough PTX parsing for the simulated driver: kernel entry names and module-scope variables.

/// A module-scope variable (`.global` or `.const`) and its size in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// Variable name, as `cuModuleGetGlobal` looks it up.
    pub name: String,
    /// Size in bytes.
    pub size: usize,
}

/// What a module image declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Module {
    /// Every `.entry` name, in order.
    pub entries: Vec<String>,
    /// Every module-scope variable.
    pub globals: Vec<Global>,
}

/// Why an image is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// The image is a cubin/fatbin (ELF or fatbin magic): there is no SASS simulator.
    Binary,
    /// The text is not PTX (no `.version` directive).
    NotPtx,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.'
}

fn type_size(t: &str) -> Option<usize> {
    Some(match t {
        ".u8" | ".s8" | ".b8" | ".pred" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

/// Parses a PTX image's bytes (NUL-terminated text as `cuModuleLoadData` receives it, or file contents).
pub fn parse(image: &[u8]) -> Result<Module, ImageError> {
    if image.starts_with(b"\x7fELF")
        || image.starts_with(&[0x50, 0xed, 0x55, 0xba])
        || image.starts_with(&[0x46, 0x62, 0x43, 0x46])
    {
        return Err(ImageError::Binary);
    }
    let end = image.iter().position(|&b| b == 0).unwrap_or(image.len());
    let text = String::from_utf8_lossy(&image[..end]);
    if !text.contains(".version") && !text.contains(".entry") {
        return Err(ImageError::NotPtx);
    }
    let mut module = Module::default();
    for statement in strip_comments(&text).split(';') {
        let mut tokens = statement.split_whitespace().peekable();
        while let Some(t) = tokens.peek() {
            if matches!(*t, ".visible" | ".extern" | ".weak" | ".entry" | ".global" | ".const") {
                break;
            }
            tokens.next();
        }
        // Only module-level directives start a statement with these keywords.
        let mut first = tokens.clone();
        while matches!(first.peek(), Some(&".visible" | &".extern" | &".weak")) {
            first.next();
        }
        match first.next() {
            Some(".entry") => {
                let rest: String = first.collect::<Vec<_>>().join(" ");
                let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() {
                    module.entries.push(name);
                }
            }
            Some(".global" | ".const") => {
                if let Some(g) = parse_global(first.collect::<Vec<_>>().join(" ").as_str()) {
                    module.globals.push(g);
                }
            }
            _ => {}
        }
    }
    Ok(module)
}

/// The parameter layout of entry `name` in PTX `image`, from its `.param` declarations: each at the
/// next multiple of its alignment (`.align N`, else its element size), as the ABI lays out the
/// parameter buffer; `(offset, size)` pairs. `None` when the entry or a declaration cannot be read.
pub fn entry_params(image: &[u8], name: &str) -> Option<Vec<(u32, u32)>> {
    let end = image.iter().position(|&b| b == 0).unwrap_or(image.len());
    let text = strip_comments(&String::from_utf8_lossy(&image[..end]));
    let mut at = 0;
    let list = loop {
        let found = at + text[at..].find(".entry")?;
        let rest = text[found + ".entry".len()..].trim_start();
        at = found + ".entry".len();
        if let Some(after) = rest.strip_prefix(name).map(str::trim_start).filter(|r| r.starts_with('(')) {
            break &after[1..after.find(')')?];
        }
    };
    let mut offset = 0u32;
    let mut params = Vec::new();
    for decl in list.split(',').filter(|d| d.contains(".param")) {
        let tokens: Vec<&str> = decl.split_whitespace().collect();
        let elem = tokens.iter().find_map(|t| type_size(t))? as u32;
        let align = match tokens.iter().position(|t| *t == ".align") {
            Some(i) => tokens.get(i + 1)?.parse::<u32>().ok()?,
            None => elem,
        };
        let last = tokens.last()?;
        let count = match last.find('[') {
            Some(i) => last[i + 1..last.find(']')?].trim().parse::<u32>().ok()?,
            None => 1,
        };
        offset = offset.next_multiple_of(align.max(1));
        params.push((offset, elem * count));
        offset += elem * count;
    }
    Some(params)
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("//") {
            rest = tail.find('\n').map_or("", |n| &tail[n..]);
        } else if tail.starts_with("/*") {
            rest = tail.find("*/").map_or("", |n| &tail[n + 2..]);
        } else {
            out.push('/');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Parses what follows `.global`: `[.align N] .TYPE NAME[[COUNT]] [= {...}]`.
fn parse_global(decl: &str) -> Option<Global> {
    let (decl, init) = match decl.split_once('=') {
        Some((d, i)) => (d, Some(i)),
        None => (decl, None),
    };
    let mut tokens = decl.split_whitespace();
    let mut elem = None;
    let mut name_tok = None;
    while let Some(t) = tokens.next() {
        if t == ".align" {
            tokens.next();
        } else if let Some(s) = type_size(t) {
            elem = Some(s);
        } else if !t.starts_with('.') {
            name_tok = Some(t.to_string() + &tokens.collect::<String>());
            break;
        }
    }
    let (elem, name_tok) = (elem?, name_tok?);
    let name: String = name_tok.chars().take_while(|&c| is_ident(c)).collect();
    let count = match name_tok.find('[') {
        None => 1,
        Some(i) => {
            let inner = &name_tok[i + 1..name_tok[i..].find(']')? + i];
            if inner.trim().is_empty() {
                init.map_or(1, |v| v.split(',').count())
            } else {
                inner.trim().parse().ok()?
            }
        }
    };
    Some(Global { name, size: elem * count })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64
// .entry commented_out(
.global .align 4 .u32 counter;
.visible .global .align 4 .f32 table[256];
.const .u64 limits[] = {1, 2, 3};
.visible .entry vector_add_f32(
    .param .u64 a, .param .u64 b, .param .u64 c, .param .u64 n
)
{
    ld.global.f32 %f1, [%rd1];
    ret;
}
.entry spin(.param .u64 ns) { ret; }
"#;

    #[test]
    fn finds_entries_and_globals() {
        let m = parse(format!("{PTX}\0").as_bytes()).unwrap();
        assert_eq!(m.entries, vec!["vector_add_f32", "spin"]);
        assert_eq!(
            m.globals,
            vec![
                Global { name: "counter".into(), size: 4 },
                Global { name: "table".into(), size: 1024 },
                Global { name: "limits".into(), size: 24 },
            ]
        );
    }

    /// The modules the project ships: the product's `spin` and the test programs' kernels.
    const SPIN_MODULE: &str = include_str!("../../../tools/kernels/spin.ptx");
    const KERNELS_MODULE: &str = include_str!("../../kernels/kernels.ptx");

    #[test]
    fn finds_the_entries_of_the_shipped_modules() {
        // Real bodies: comments, labels, braces, predicated branches, `ld.global`/`st.global` and
        // `cvta.to.global` inside functions (none of them a module-scope `.global`).
        let spin = parse(format!("{SPIN_MODULE}\0").as_bytes()).unwrap();
        assert_eq!(spin, Module { entries: vec!["spin".into(), "spin_stamp".into()], globals: vec![] });
        let kernels = parse(format!("{KERNELS_MODULE}\0").as_bytes()).unwrap();
        assert_eq!(
            kernels,
            Module {
                entries: vec!["fill_u32".into(), "vector_add_f32".into(), "saxpy_f32".into(), "custom_kernel".into()],
                globals: vec![],
            }
        );
        // Without the terminating NUL too (a file's contents).
        assert_eq!(parse(KERNELS_MODULE.as_bytes()).unwrap(), kernels);
    }

    /// The sizes of `.param` declarations of entry `name` in `module`, in order.
    fn declared_param_sizes(module: &str, name: &str) -> Vec<usize> {
        let text = strip_comments(module);
        let start = text.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("no entry {name}"));
        let list = &text[start..][..text[start..].find(')').expect("closing parenthesis")];
        list.split(".param").skip(1).map(|p| type_size(p.split_whitespace().next().unwrap()).unwrap()).collect()
    }

    #[test]
    fn the_shipped_kernels_take_the_parameters_the_simulator_decodes() {
        use crate::kernels::Builtin;
        assert_eq!(declared_param_sizes(SPIN_MODULE, "spin"), Builtin::Spin.param_sizes());
        assert_eq!(declared_param_sizes(SPIN_MODULE, "spin_stamp"), Builtin::SpinStamp.param_sizes());
        for (name, builtin) in [
            ("fill_u32", Builtin::FillU32),
            ("vector_add_f32", Builtin::VectorAddF32),
            ("saxpy_f32", Builtin::SaxpyF32),
        ] {
            assert_eq!(Builtin::from_name(name), Some(builtin));
            assert_eq!(declared_param_sizes(KERNELS_MODULE, name), builtin.param_sizes(), "{name}");
        }
        assert_eq!(Builtin::from_name("custom_kernel"), None, "custom_kernel is one simgpu does not know");
    }

    #[test]
    fn entry_parameters_are_laid_out_by_alignment() {
        let image = format!("{PTX}\0");
        assert_eq!(entry_params(image.as_bytes(), "vector_add_f32"), Some(vec![(0, 8), (8, 8), (16, 8), (24, 8)]));
        let odd = ".version 8.0\n.visible .entry k(.param .u32 a, .param .align 8 .b8 s[12], .param .u16 h) { ret; }";
        assert_eq!(entry_params(odd.as_bytes(), "k"), Some(vec![(0, 4), (8, 12), (20, 2)]));
        assert_eq!(entry_params(odd.as_bytes(), "missing"), None);
    }

    #[test]
    fn labels_predicates_and_block_comments_hide_no_entry() {
        let text = "/* .entry hidden_in_a_block_comment(.param .u64 x) { ret; } */\n\
            .version 7.0\n.target sm_50\n.address_size 64\n\
            .visible .entry\nsplit_line(\n.param .u64 p\n)\n{\n.reg .pred %p<2>;\n\
            $L_top: // a label; .entry in a comment(\n\
            @%p1 bra $L_top;\n{ .reg .b32 %inner; }\nret;\n}\n";
        assert_eq!(parse(text.as_bytes()).unwrap().entries, vec!["split_line"]);
    }

    #[test]
    fn rejects_binaries_and_garbage() {
        assert_eq!(parse(b"\x7fELF\x02\x01"), Err(ImageError::Binary));
        assert_eq!(parse(b"hello world\0"), Err(ImageError::NotPtx));
    }
}
