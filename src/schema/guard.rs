//! What analysing one untrusted file may cost, and the checks that hold it to that.
//!
//! `rustpython-parser` is a table-driven (LALRPOP) parser, so parsing itself does not recurse
//! with the input; but the syntax tree it builds is a chain of `Box`es as deep as the source
//! nests (`-----x`, `1+1+1`, `f()()()`, `elif` chains, anything inside an f-string, which the
//! parser re-parses from the string's text), and dropping such a tree recurses once per level.
//! The parser drops partial trees itself on a syntax error, so no walk of ours can come first.
//! Hence three layers:
//!
//! 1. Before parsing: the size cap ([`MAX_SOURCE`]) and CPython's own tokenizer limits (200
//!    nested brackets, also counted inside f-strings, and 100 indentation levels). Brackets
//!    bound the only recursion that runs *while* parsing (assignment and comprehension targets
//!    are re-tagged recursively, ~400 bytes of stack per nested bracket).
//! 2. The whole analysis runs on a thread whose stack holds the deepest tree the size cap
//!    allows (see [`ANALYSIS_STACK_BYTES`]), so parsing and dropping any accepted-size file
//!    cannot overflow, whatever its spelling.
//! 3. After parsing: [`syntax_depth`] measures the tree without recursing and refuses it past
//!    [`MAX_SYNTAX_DEPTH`], so the analysis proper only ever sees trees of sane depth.

use bytesize::ByteSize;
use rustpython_parser::Tok;
use rustpython_parser::ast::{self, Expr, Pattern, Ranged, Stmt};
use rustpython_parser::lexer::LexResult;

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

/// Checks the lexer's tokens against CPython's bracket and indentation limits, counting the
/// brackets inside f-strings too (the parser re-parses their text).
pub(crate) fn lexical_nesting(tokens: &[LexResult]) -> Result<(), TooComplex> {
    let (mut brackets, mut indents) = (0usize, 0usize);
    for (tok, range) in tokens.iter().flatten() {
        let offset = usize::from(range.start());
        let inner = match tok {
            Tok::Lpar | Tok::Lsqb | Tok::Lbrace => {
                brackets += 1;
                0
            }
            Tok::Rpar | Tok::Rsqb | Tok::Rbrace => {
                brackets = brackets.saturating_sub(1);
                0
            }
            Tok::Indent => {
                indents += 1;
                0
            }
            Tok::Dedent => {
                indents = indents.saturating_sub(1);
                0
            }
            Tok::String { value, kind, .. } if kind.is_any_fstring() => text_brackets(value),
            _ => 0,
        };
        if brackets + inner > MAX_BRACKETS {
            return Err(TooComplex {
                offset,
                what: format!("it nests more than {MAX_BRACKETS} brackets deep"),
            });
        }
        if indents > MAX_INDENT {
            return Err(TooComplex {
                offset,
                what: format!("it nests more than {MAX_INDENT} indented blocks deep"),
            });
        }
    }
    Ok(())
}

/// Deepest bracket nesting in raw text (an f-string's), an upper bound of what its
/// expressions nest: brackets inside nested string literals count too.
fn text_brackets(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A node of the syntax tree that counts as one level.
#[derive(Clone, Copy)]
enum Node<'a> {
    Stmt(&'a Stmt),
    Expr(&'a Expr),
    Pattern(&'a Pattern),
}

impl Node<'_> {
    fn offset(self) -> usize {
        let range = match self {
            Node::Stmt(s) => s.range(),
            Node::Expr(e) => e.range(),
            Node::Pattern(p) => p.range(),
        };
        usize::from(range.start())
    }
}

/// Refuses a module whose tree nests deeper than [`MAX_SYNTAX_DEPTH`].
pub(crate) fn module_depth(body: &[Stmt]) -> Result<(), TooComplex> {
    syntax_depth(body.iter().map(Node::Stmt).collect())
}

/// Refuses an expression (a string annotation) that nests deeper than [`MAX_SYNTAX_DEPTH`].
pub(crate) fn expression_depth(expr: &Expr) -> Result<(), TooComplex> {
    syntax_depth(vec![Node::Expr(expr)])
}

/// Depth-first walk with an explicit stack, so that measuring a tree of any depth cannot
/// overflow; it stops at the first node past the bound.
fn syntax_depth(roots: Vec<Node<'_>>) -> Result<(), TooComplex> {
    let mut pending: Vec<(Node<'_>, usize)> = roots.into_iter().map(|n| (n, 1)).collect();
    let mut children = Vec::new();
    while let Some((node, depth)) = pending.pop() {
        if depth > MAX_SYNTAX_DEPTH {
            return Err(TooComplex {
                offset: node.offset(),
                what: format!("it nests more than {MAX_SYNTAX_DEPTH} levels deep"),
            });
        }
        children_of(node, &mut children);
        pending.extend(children.drain(..).map(|c| (c, depth + 1)));
    }
    Ok(())
}

/// Every statement, expression and pattern directly below `node` (through the helper nodes
/// that do not count as a level: arguments, keywords, comprehensions, handlers, ...).
fn children_of<'a>(node: Node<'a>, out: &mut Vec<Node<'a>>) {
    match node {
        Node::Stmt(s) => stmt_children(s, out),
        Node::Expr(e) => expr_children(e, out),
        Node::Pattern(p) => pattern_children(p, out),
    }
}

fn exprs<'a>(es: &'a [Expr], out: &mut Vec<Node<'a>>) {
    out.extend(es.iter().map(Node::Expr));
}

fn stmts<'a>(ss: &'a [Stmt], out: &mut Vec<Node<'a>>) {
    out.extend(ss.iter().map(Node::Stmt));
}

fn opt<'a>(e: &'a Option<Box<Expr>>, out: &mut Vec<Node<'a>>) {
    if let Some(e) = e {
        out.push(Node::Expr(e));
    }
}

fn arguments<'a>(a: &'a ast::Arguments, out: &mut Vec<Node<'a>>) {
    for arg in a.posonlyargs.iter().chain(&a.args).chain(&a.kwonlyargs) {
        opt(&arg.def.annotation, out);
        opt(&arg.default, out);
    }
    for arg in [&a.vararg, &a.kwarg].into_iter().flatten() {
        opt(&arg.annotation, out);
    }
}

fn type_params<'a>(ps: &'a [ast::TypeParam], out: &mut Vec<Node<'a>>) {
    for p in ps {
        if let ast::TypeParam::TypeVar(v) = p {
            opt(&v.bound, out);
        }
    }
}

fn handlers<'a>(hs: &'a [ast::ExceptHandler], out: &mut Vec<Node<'a>>) {
    for ast::ExceptHandler::ExceptHandler(h) in hs {
        opt(&h.type_, out);
        stmts(&h.body, out);
    }
}

fn with_items<'a>(items: &'a [ast::WithItem], out: &mut Vec<Node<'a>>) {
    for item in items {
        out.push(Node::Expr(&item.context_expr));
        opt(&item.optional_vars, out);
    }
}

fn generators<'a>(gs: &'a [ast::Comprehension], out: &mut Vec<Node<'a>>) {
    for g in gs {
        out.push(Node::Expr(&g.target));
        out.push(Node::Expr(&g.iter));
        exprs(&g.ifs, out);
    }
}

fn stmt_children<'a>(s: &'a Stmt, out: &mut Vec<Node<'a>>) {
    match s {
        Stmt::FunctionDef(f) => {
            arguments(&f.args, out);
            stmts(&f.body, out);
            exprs(&f.decorator_list, out);
            opt(&f.returns, out);
            type_params(&f.type_params, out);
        }
        Stmt::AsyncFunctionDef(f) => {
            arguments(&f.args, out);
            stmts(&f.body, out);
            exprs(&f.decorator_list, out);
            opt(&f.returns, out);
            type_params(&f.type_params, out);
        }
        Stmt::ClassDef(c) => {
            exprs(&c.bases, out);
            out.extend(c.keywords.iter().map(|k| Node::Expr(&k.value)));
            stmts(&c.body, out);
            exprs(&c.decorator_list, out);
            type_params(&c.type_params, out);
        }
        Stmt::Return(r) => opt(&r.value, out),
        Stmt::Delete(d) => exprs(&d.targets, out),
        Stmt::Assign(a) => {
            exprs(&a.targets, out);
            out.push(Node::Expr(&a.value));
        }
        Stmt::TypeAlias(t) => {
            out.push(Node::Expr(&t.name));
            type_params(&t.type_params, out);
            out.push(Node::Expr(&t.value));
        }
        Stmt::AugAssign(a) => {
            out.push(Node::Expr(&a.target));
            out.push(Node::Expr(&a.value));
        }
        Stmt::AnnAssign(a) => {
            out.push(Node::Expr(&a.target));
            out.push(Node::Expr(&a.annotation));
            opt(&a.value, out);
        }
        Stmt::For(f) => {
            out.push(Node::Expr(&f.target));
            out.push(Node::Expr(&f.iter));
            stmts(&f.body, out);
            stmts(&f.orelse, out);
        }
        Stmt::AsyncFor(f) => {
            out.push(Node::Expr(&f.target));
            out.push(Node::Expr(&f.iter));
            stmts(&f.body, out);
            stmts(&f.orelse, out);
        }
        Stmt::While(w) => {
            out.push(Node::Expr(&w.test));
            stmts(&w.body, out);
            stmts(&w.orelse, out);
        }
        Stmt::If(i) => {
            out.push(Node::Expr(&i.test));
            stmts(&i.body, out);
            stmts(&i.orelse, out);
        }
        Stmt::With(w) => {
            with_items(&w.items, out);
            stmts(&w.body, out);
        }
        Stmt::AsyncWith(w) => {
            with_items(&w.items, out);
            stmts(&w.body, out);
        }
        Stmt::Match(m) => {
            out.push(Node::Expr(&m.subject));
            for case in &m.cases {
                out.push(Node::Pattern(&case.pattern));
                opt(&case.guard, out);
                stmts(&case.body, out);
            }
        }
        Stmt::Raise(r) => {
            opt(&r.exc, out);
            opt(&r.cause, out);
        }
        Stmt::Try(t) => {
            stmts(&t.body, out);
            handlers(&t.handlers, out);
            stmts(&t.orelse, out);
            stmts(&t.finalbody, out);
        }
        Stmt::TryStar(t) => {
            stmts(&t.body, out);
            handlers(&t.handlers, out);
            stmts(&t.orelse, out);
            stmts(&t.finalbody, out);
        }
        Stmt::Assert(a) => {
            out.push(Node::Expr(&a.test));
            opt(&a.msg, out);
        }
        Stmt::Expr(e) => out.push(Node::Expr(&e.value)),
        Stmt::Import(_)
        | Stmt::ImportFrom(_)
        | Stmt::Global(_)
        | Stmt::Nonlocal(_)
        | Stmt::Pass(_)
        | Stmt::Break(_)
        | Stmt::Continue(_) => {}
    }
}

fn expr_children<'a>(e: &'a Expr, out: &mut Vec<Node<'a>>) {
    match e {
        Expr::BoolOp(b) => exprs(&b.values, out),
        Expr::NamedExpr(n) => {
            out.push(Node::Expr(&n.target));
            out.push(Node::Expr(&n.value));
        }
        Expr::BinOp(b) => {
            out.push(Node::Expr(&b.left));
            out.push(Node::Expr(&b.right));
        }
        Expr::UnaryOp(u) => out.push(Node::Expr(&u.operand)),
        Expr::Lambda(l) => {
            arguments(&l.args, out);
            out.push(Node::Expr(&l.body));
        }
        Expr::IfExp(i) => {
            out.push(Node::Expr(&i.test));
            out.push(Node::Expr(&i.body));
            out.push(Node::Expr(&i.orelse));
        }
        Expr::Dict(d) => {
            out.extend(d.keys.iter().flatten().map(Node::Expr));
            exprs(&d.values, out);
        }
        Expr::Set(s) => exprs(&s.elts, out),
        Expr::ListComp(c) => {
            out.push(Node::Expr(&c.elt));
            generators(&c.generators, out);
        }
        Expr::SetComp(c) => {
            out.push(Node::Expr(&c.elt));
            generators(&c.generators, out);
        }
        Expr::DictComp(c) => {
            out.push(Node::Expr(&c.key));
            out.push(Node::Expr(&c.value));
            generators(&c.generators, out);
        }
        Expr::GeneratorExp(c) => {
            out.push(Node::Expr(&c.elt));
            generators(&c.generators, out);
        }
        Expr::Await(a) => out.push(Node::Expr(&a.value)),
        Expr::Yield(y) => opt(&y.value, out),
        Expr::YieldFrom(y) => out.push(Node::Expr(&y.value)),
        Expr::Compare(c) => {
            out.push(Node::Expr(&c.left));
            exprs(&c.comparators, out);
        }
        Expr::Call(c) => {
            out.push(Node::Expr(&c.func));
            exprs(&c.args, out);
            out.extend(c.keywords.iter().map(|k| Node::Expr(&k.value)));
        }
        Expr::FormattedValue(f) => {
            out.push(Node::Expr(&f.value));
            opt(&f.format_spec, out);
        }
        Expr::JoinedStr(j) => exprs(&j.values, out),
        Expr::Attribute(a) => out.push(Node::Expr(&a.value)),
        Expr::Subscript(s) => {
            out.push(Node::Expr(&s.value));
            out.push(Node::Expr(&s.slice));
        }
        Expr::Starred(s) => out.push(Node::Expr(&s.value)),
        Expr::List(l) => exprs(&l.elts, out),
        Expr::Tuple(t) => exprs(&t.elts, out),
        Expr::Slice(s) => {
            opt(&s.lower, out);
            opt(&s.upper, out);
            opt(&s.step, out);
        }
        Expr::Constant(_) | Expr::Name(_) => {}
    }
}

fn pattern_children<'a>(p: &'a Pattern, out: &mut Vec<Node<'a>>) {
    match p {
        Pattern::MatchValue(v) => out.push(Node::Expr(&v.value)),
        Pattern::MatchSingleton(_) | Pattern::MatchStar(_) => {}
        Pattern::MatchSequence(s) => out.extend(s.patterns.iter().map(Node::Pattern)),
        Pattern::MatchMapping(m) => {
            exprs(&m.keys, out);
            out.extend(m.patterns.iter().map(Node::Pattern));
        }
        Pattern::MatchClass(c) => {
            out.push(Node::Expr(&c.cls));
            out.extend(c.patterns.iter().map(Node::Pattern));
            out.extend(c.kwd_patterns.iter().map(Node::Pattern));
        }
        Pattern::MatchAs(a) => {
            if let Some(p) = &a.pattern {
                out.push(Node::Pattern(p));
            }
        }
        Pattern::MatchOr(o) => out.extend(o.patterns.iter().map(Node::Pattern)),
    }
}
