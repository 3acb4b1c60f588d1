//! What analysing one untrusted file may cost, and the checks that hold it to that.
//!
//! Ruff's parser is a recursive-descent parser: it recurses once per nested bracket, once per
//! operator whose operand it reads by calling itself (`- - -x`, `not not x`, `lambda: lambda:
//! 1`, `a if b else c if d else e`, `2 ** 2 ** 2`, `await`, `yield`, `*`), and once per
//! compound statement it finds inside another (also the ones written on one line, which it
//! reads to recover from the syntax error). The tree it builds is a chain of `Box`es as deep as
//! the source nests (`1+1+1` and `f()()()` are built by loops, but as deep trees), and dropping
//! such a tree recurses once per level. Hence three layers:
//!
//! 1. Before parsing, on the lexer's tokens (the very tokens the parser reads; f-strings are
//!    tokens too, their `{` brackets among them): the size cap ([`MAX_SOURCE`]), CPython's own
//!    tokenizer limits (200 nested brackets, 100 indentation levels), and at most
//!    [`MAX_SYNTAX_DEPTH`] such operators and statement keywords open at once (see [`Open`]).
//!    Together they bound the parser's recursion, so parsing an accepted file cannot overflow.
//! 2. The whole analysis runs on a thread whose stack holds the deepest tree the size cap
//!    allows (see [`ANALYSIS_STACK_BYTES`]), so building and dropping any accepted-size tree
//!    cannot overflow, whatever its spelling.
//! 3. After parsing: [`syntax_depth`] measures the tree without recursing and refuses it past
//!    [`MAX_SYNTAX_DEPTH`], so the analysis proper only ever sees trees of sane depth.

use bytesize::ByteSize;
use ruff_python_ast::AnyNodeRef;
use ruff_python_ast::token::TokenKind;
use ruff_python_ast::visitor::source_order::{SourceOrderVisitor, TraversalSignal};
use ruff_python_parser::{Mode, lexer};
use ruff_text_size::Ranged;

/// Largest tool source analysed: 1 MiB, the same cap as a stored tool version. A larger file
/// gets a `source-too-complex` diagnostic and no schema.
pub const MAX_SOURCE: ByteSize = ByteSize::mib(1);

/// Deepest syntax tree analysed, counted in statements, expressions and patterns nested in one
/// another: 4000. CPython 3.11 refuses code nested past about 3000 levels ("maximum recursion
/// depth exceeded during compilation"; measured for unary and binary operator chains, call,
/// attribute and subscript chains, lambdas and `elif` chains), so any file Python can compile
/// passes, including a 2,000-term sum or a 300-branch `elif`. A deeper file gets a
/// `source-too-complex` diagnostic pointing at the first node past the bound.
pub const MAX_SYNTAX_DEPTH: usize = 4000;

/// Most nested brackets, as in CPython's tokenizer ("too many nested parentheses").
pub const MAX_BRACKETS: usize = 200;

/// Most indentation levels, as in CPython's tokenizer ("too many levels of indentation").
pub const MAX_INDENT: usize = 100;

/// Largest schema derived or exported, as JSON text: 1 MiB (a 1 MiB source cannot need more
/// unless it spells one thing many times). A derived schema past it (parameters and return
/// type together) is a `schema-too-large` error. Exports that inline `$defs` (Letta, the
/// strict variant's described `$ref`s) inline only while the result stays within it and keep
/// `$ref`s past that, so an export is at most about twice the derived schema, never
/// exponential in the number of models.
pub const MAX_SCHEMA: ByteSize = ByteSize::mib(1);

/// Length of `v` as compact JSON text, counted without building the text.
pub(crate) fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.0,
        // Only a writer's error stops serde_json, and this writer never fails.
        Err(_) => usize::MAX,
    }
}

/// Stack of the analysis thread: 256 MiB of address space, of which a sane file touches a few
/// hundred KiB. Measured in a debug build (the worst case; release frames are smaller),
/// dropping a tree costs about 100 bytes of stack per level for expression chains and 225 for
/// `elif` chains; the deepest tree 1 MiB can spell is about a million levels (`-` repeated),
/// so 100 MiB, and 256 MiB leaves room for the parser's own frames and optimizer changes.
pub(crate) const ANALYSIS_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Why a file is refused before its analysis: where, and a phrase for "the file is too complex
/// to analyse safely: ...".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooComplex {
    /// Byte offset of the culprit.
    pub offset: usize,
    /// What is too much, e.g. "it nests more than 200 brackets deep".
    pub what: String,
}

/// Runs `work` on a thread with [`ANALYSIS_STACK_BYTES`] of stack and returns its result.
///
/// Spawning a thread is the one impurity `schema` allows itself: the caller's stack (a tokio
/// worker has 2 MiB) cannot be grown, and a stack overflow aborts the whole process, which a
/// hostile file must never be able to do. `Err` carries a phrase when the thread could not be
/// started or panicked (a bug in the parser); the caller turns it into a diagnostic.
pub(crate) fn on_analysis_stack<T: Send>(work: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("warden-schema".into())
            .stack_size(ANALYSIS_STACK_BYTES)
            .spawn_scoped(scope, work)
            .map_err(|e| format!("the analysis could not start ({e})"))?;
        handle
            .join()
            .map_err(|_| "the parser stopped on an internal error".to_string())
    })
}

/// Refuses `source` (to be parsed in `mode`) when its tokens pass a bound the parser's
/// recursion depends on: brackets, indentation, or the operators and keywords of [`Open`].
pub(crate) fn lexical_nesting(source: &str, mode: Mode) -> Result<(), TooComplex> {
    match first_excess(source, mode) {
        None => Ok(()),
        Some(what) => Err(TooComplex {
            offset: culprit(source, mode),
            what,
        }),
    }
}

/// The first bound the tokens of `source` pass, as a phrase, or `None`.
fn first_excess(source: &str, mode: Mode) -> Option<String> {
    let mut lexer = lexer::lex(source, mode);
    let mut open = Open::default();
    // Every token but the few the lexer adds at line ends and at the end (newlines,
    // dedents) consumes source text: this bounds the loop whatever the lexer does.
    let mut budget = source
        .len()
        .saturating_mul(4)
        .saturating_add(4 * MAX_INDENT + 64);
    loop {
        let kind = lexer.next_token();
        if kind == TokenKind::EndOfFile {
            return None;
        }
        if budget == 0 {
            return Some("its tokens could not be read to the end".into());
        }
        budget -= 1;
        if let Some(what) = open.push(kind) {
            return Some(what);
        }
    }
}

/// Byte offset of the token at which [`first_excess`] fails. Ruff's public lexer gives token
/// kinds without positions, so this bisects for the shortest prefix of `source` that fails
/// (a prefix lexes to the same tokens up to its cut); it runs only for a refused file, about
/// 20 passes of the lexer.
fn culprit(source: &str, mode: Mode) -> usize {
    // Invariant: the prefix up to `lo` passes, the one up to `hi` fails.
    let (mut lo, mut hi) = (0, source.len());
    loop {
        let mut mid = lo + (hi - lo) / 2;
        while !source.is_char_boundary(mid) {
            mid += 1;
        }
        if mid <= lo || mid >= hi {
            break;
        }
        match source.get(..mid) {
            Some(prefix) if first_excess(prefix, mode).is_some() => hi = mid,
            _ => lo = mid,
        }
    }
    // The culprit token ends at `hi`: point at its start (a keyword's first letter).
    let head = source.get(..hi).unwrap_or(source);
    let word = head.trim_end_matches(is_word).len();
    if word < head.len() {
        word
    } else {
        head.char_indices().next_back().map_or(0, |(i, _)| i)
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// What is open while the tokens are read: brackets, indented blocks, and the constructs the
/// parser reads by recursion.
///
/// A construct opens at its token (a prefix `-`, `+`, `~`, `*` or `not`, any `**`, `await`,
/// `if`, `:=`, `lambda`, `yield`, and the keywords that start a compound statement) and stays
/// open until its operand must have ended: at a comma of its bracket level (but not the comma
/// of a `lambda`'s parameters or of a `yield`'s tuple), when its bracket closes, or at the end
/// of the logical line. A semicolon ends nothing: the parser may read `if a: pass; if b: ...`
/// as nested. The count is an upper bound of the parser's recursion, never less; an honest
/// file stays far below [`MAX_SYNTAX_DEPTH`] (a table of 10,000 negative numbers has one
/// open at a time).
#[derive(Debug, Default)]
pub(crate) struct Open {
    /// The levels of the enclosing brackets, outermost first.
    outer: Vec<Level>,
    /// The innermost level.
    current: Level,
    /// Constructs open at every level together.
    total: usize,
    indents: usize,
    /// Whether the last token ends an operand, so that a `-` or `not` after it is binary.
    after_operand: bool,
}

/// The constructs open at one bracket level: `open`, of which `kept` survive a comma.
#[derive(Debug, Default, Clone, Copy)]
struct Level {
    open: usize,
    kept: usize,
}

impl Open {
    /// Takes the next token; a phrase for "too complex" when it passes a bound.
    pub(crate) fn push(&mut self, kind: TokenKind) -> Option<String> {
        use TokenKind as T;
        let excess = match kind {
            T::Lpar | T::Lsqb | T::Lbrace => {
                self.outer.push(std::mem::take(&mut self.current));
                (self.outer.len() > MAX_BRACKETS)
                    .then(|| format!("it nests more than {MAX_BRACKETS} brackets deep"))
            }
            T::Rpar | T::Rsqb | T::Rbrace => {
                if let Some(outer) = self.outer.pop() {
                    self.total -= self.current.open;
                    self.current = outer;
                }
                None
            }
            T::Comma => {
                self.total -= self.current.open - self.current.kept;
                self.current.open = self.current.kept;
                None
            }
            T::Newline => {
                self.outer.clear();
                self.current = Level::default();
                self.total = 0;
                None
            }
            T::Indent => {
                self.indents += 1;
                (self.indents > MAX_INDENT)
                    .then(|| format!("it nests more than {MAX_INDENT} indented blocks deep"))
            }
            T::Dedent => {
                self.indents = self.indents.saturating_sub(1);
                None
            }
            T::Minus | T::Plus | T::Tilde | T::Star | T::Not if !self.after_operand => {
                self.open(false)
            }
            T::Lambda | T::Yield => self.open(true),
            T::DoubleStar
            | T::Await
            | T::If
            | T::ColonEqual
            | T::Elif
            | T::Else
            | T::While
            | T::For
            | T::With
            | T::Try
            | T::Except
            | T::Finally
            | T::Def
            | T::Class
            | T::Match
            | T::Case => self.open(false),
            _ => None,
        };
        if !matches!(kind, T::Comment | T::NonLogicalNewline) {
            self.after_operand = matches!(
                kind,
                T::Name
                    | T::Int
                    | T::Float
                    | T::Complex
                    | T::String
                    | T::FStringEnd
                    | T::TStringEnd
                    | T::Rpar
                    | T::Rsqb
                    | T::Rbrace
                    | T::True
                    | T::False
                    | T::None
                    | T::Ellipsis
            );
        }
        excess
    }

    /// Opens one construct; `kept` when a comma does not end it.
    fn open(&mut self, kept: bool) -> Option<String> {
        self.current.open += 1;
        self.total += 1;
        if kept {
            self.current.kept = self.current.open;
        }
        (self.total > MAX_SYNTAX_DEPTH)
            .then(|| format!("it nests more than {MAX_SYNTAX_DEPTH} levels deep"))
    }
}

/// Refuses a tree (a module's statements, or a string annotation's expression) that nests
/// deeper than [`MAX_SYNTAX_DEPTH`] statements, expressions and patterns.
pub(crate) fn syntax_depth<'a>(
    roots: impl IntoIterator<Item = AnyNodeRef<'a>>,
) -> Result<(), TooComplex> {
    // Depth-first with an explicit stack, so that measuring a tree of any depth cannot
    // overflow; it stops at the first node past the bound.
    let mut pending: Vec<(AnyNodeRef<'a>, usize)> = roots.into_iter().map(|n| (n, 0)).collect();
    let mut children = Children(Vec::new());
    while let Some((node, above)) = pending.pop() {
        let depth = above + usize::from(counts(node));
        if depth > MAX_SYNTAX_DEPTH {
            return Err(TooComplex {
                offset: node.start().to_usize(),
                what: format!("it nests more than {MAX_SYNTAX_DEPTH} levels deep"),
            });
        }
        node.visit_source_order(&mut children);
        pending.extend(children.0.drain(..).map(|c| (c, depth)));
    }
    Ok(())
}

/// Whether a node counts as a level: statements, expressions and patterns do; the helper
/// nodes between them (arguments, keywords, comprehensions, handlers, ...) do not.
fn counts(node: AnyNodeRef<'_>) -> bool {
    node.is_statement() || node.is_expression() || node.is_pattern()
}

/// Collects the direct children of one node: Ruff's visitor calls `enter_node` for each, and
/// `Skip` keeps it from descending.
struct Children<'a>(Vec<AnyNodeRef<'a>>);

impl<'a> SourceOrderVisitor<'a> for Children<'a> {
    fn enter_node(&mut self, node: AnyNodeRef<'a>) -> TraversalSignal {
        self.0.push(node);
        TraversalSignal::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(source: &str) -> Option<TooComplex> {
        lexical_nesting(source, Mode::Module).err()
    }

    #[test]
    fn a_prefix_chain_past_the_bound_is_refused_at_the_first_operator_past_it() {
        let head = "x = 1\ny = ";
        let source = format!("{head}{}x\n", "-".repeat(MAX_SYNTAX_DEPTH + 10));
        let refused = refusal(&source).expect("refused");
        assert_eq!(refused.offset, head.len() + MAX_SYNTAX_DEPTH);
        assert!(refused.what.contains("levels deep"), "{}", refused.what);
        assert!(refusal(&format!("{head}{}x\n", "-".repeat(MAX_SYNTAX_DEPTH))).is_none());
    }

    #[test]
    fn a_keyword_culprit_is_pointed_at_by_its_first_letter() {
        let source = format!("y = {}1\n", "lambda: ".repeat(MAX_SYNTAX_DEPTH + 1));
        let refused = refusal(&source).expect("refused");
        assert_eq!(refused.offset, "y = ".len() + 8 * MAX_SYNTAX_DEPTH);
    }

    #[test]
    fn a_comma_ends_what_is_open_but_not_a_lambdas_parameters() {
        let table = format!("y = [{}]\n", "-1, ".repeat(3 * MAX_SYNTAX_DEPTH));
        assert!(refusal(&table).is_none());
        let lambdas = format!("y = {}1\n", "lambda a, b: ".repeat(MAX_SYNTAX_DEPTH + 1));
        assert!(refusal(&lambdas).is_some());
        let yields = format!(
            "def f():\n    yield {}1\n",
            "-1, yield ".repeat(MAX_SYNTAX_DEPTH)
        );
        assert!(refusal(&yields).is_some());
    }

    #[test]
    fn binary_operators_are_not_prefix_operators() {
        let sum = format!("y = x{}\n", " - x".repeat(3 * MAX_SYNTAX_DEPTH));
        assert!(refusal(&sum).is_none());
        let membership = format!("y = a{}\n", " not in a".repeat(3 * MAX_SYNTAX_DEPTH));
        assert!(refusal(&membership).is_none());
    }

    #[test]
    fn a_new_logical_line_closes_everything() {
        let lines = "y = not -x if z else ~w\n".repeat(3 * MAX_SYNTAX_DEPTH);
        assert!(refusal(&lines).is_none());
        // Inside brackets a line break is not the end of a logical line.
        let open = format!("y = ({}x)\n", "-\n".repeat(MAX_SYNTAX_DEPTH + 1));
        assert!(refusal(&open).is_some());
    }

    #[test]
    fn statements_written_on_one_line_count() {
        let nested = format!("{}pass\n", "if x: ".repeat(MAX_SYNTAX_DEPTH + 1));
        assert!(refusal(&nested).is_some());
        let classes = format!("{}pass\n", "class C: ".repeat(MAX_SYNTAX_DEPTH + 1));
        assert!(refusal(&classes).is_some());
    }

    #[test]
    fn brackets_count_inside_f_strings() {
        let deep = format!(
            "y = f'{{{}1{}}}'\n",
            "(".repeat(MAX_BRACKETS),
            ")".repeat(MAX_BRACKETS)
        );
        let refused = refusal(&deep).expect("refused");
        assert!(refused.what.contains("brackets"), "{}", refused.what);
        assert_eq!(refused.offset, "y = f'{".len() + MAX_BRACKETS - 1);
        let sane = format!("y = f'{{{}1{}}}'\n", "(".repeat(50), ")".repeat(50));
        assert!(refusal(&sane).is_none());
    }

    #[test]
    fn indentation_past_the_bound_is_refused() {
        let deep: String = (0..=MAX_INDENT)
            .map(|i| format!("{}if x:\n", " ".repeat(i)))
            .collect::<String>()
            + &" ".repeat(MAX_INDENT + 1)
            + "pass\n";
        let refused = refusal(&deep).expect("refused");
        assert!(refused.what.contains("indented"), "{}", refused.what);
    }

    #[test]
    fn tree_depth_counts_statements_expressions_and_patterns() {
        let parse = |source: &str| {
            ruff_python_parser::parse_module(source)
                .expect("valid")
                .into_syntax()
                .body
        };
        // A sum is built by a loop, left-nested: one level per term, plus the statement.
        let deep = parse(&format!("y = 1{}\n", "+1".repeat(MAX_SYNTAX_DEPTH)));
        assert!(syntax_depth(deep.iter().map(AnyNodeRef::from)).is_err());
        let sane = parse(&format!("y = 1{}\n", "+1".repeat(MAX_SYNTAX_DEPTH - 2)));
        assert!(syntax_depth(sane.iter().map(AnyNodeRef::from)).is_ok());
    }
}
