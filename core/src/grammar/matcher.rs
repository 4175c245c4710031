//! The stack-set recognizer (see the module documentation of [`crate::grammar`]).

use super::{ByteSet, Grammar, Op, TokenTrie};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

/// The empty stack: the whole input so far is a sentence, and the parse can end here. Also
/// "no parent" for a stack's bottom node.
const EMPTY_STACK: u32 = u32::MAX;
/// Not yet copied (compaction's forwarding table).
const NOT_COPIED: u32 = u32::MAX;

/// One entry of a stack: a grammar position and the entry below it. A stack is the index of
/// its top node; stacks that share a bottom share its nodes.
#[derive(Clone, Copy, Debug)]
struct Node {
    pos: u32,
    parent: u32,
    /// Entries from this one to the bottom, this one included.
    depth: u32,
}

/// The matcher's fixed capacities, all allocated by [`Matcher::with_limits`].
#[derive(Clone, Copy, Debug)]
pub struct MatcherLimits {
    /// Deepest stack: rule nesting (a JSON nesting level costs two or three entries). A byte
    /// that would nest deeper is not allowed.
    pub max_depth: u32,
    /// Most stacks (ambiguous readings) in one set; the rest are dropped.
    pub max_stacks: usize,
    /// Stack nodes in the arena (and as many again for compaction).
    pub max_nodes: usize,
    /// Stack-set entries across all the sets alive at once (one per trie depth).
    pub max_set_entries: usize,
    /// Longest token [`Matcher::fill_allowed`] considers; longer ones are never allowed.
    pub max_token_bytes: usize,
}

impl Default for MatcherLimits {
    fn default() -> Self {
        MatcherLimits {
            max_depth: 128,
            max_stacks: 256,
            max_nodes: 1 << 16,
            max_set_entries: 1 << 16,
            max_token_bytes: 512,
        }
    }
}

/// Where the stack set for one trie depth lives while [`Matcher::fill_allowed`] walks, and
/// the byte class it was computed for (`NO_CLASS`: none yet under the current parent).
#[derive(Clone, Copy, Default)]
struct Frame {
    set_start: usize,
    set_end: usize,
    node_mark: usize,
    class: u16,
    /// The byte classes known to map this set to itself (a string's ordinary characters):
    /// a child edge of such a class costs nothing, its set is this one.
    fixed: ByteSet,
}

const NO_CLASS: u16 = u16::MAX;

/// Everything a step writes to. `nodes[..base_nodes]` and `sets[..base_len]` hold the
/// committed state; scratch work appends above and is truncated away (capacity is kept, so
/// nothing is allocated).
struct Workspace {
    nodes: Vec<Node>,
    spare: Vec<Node>,
    forward: Vec<u32>,
    sets: Vec<u32>,
    base_len: usize,
    frames: Vec<Frame>,
}

/// The parse state of one generation: which bytes may come next, and the token mask.
pub struct Matcher {
    grammar: Arc<Grammar>,
    limits: MatcherLimits,
    // `allows` takes `&self` but needs scratch room: it locks. The other methods have `&mut
    // self` and reach in without locking.
    work: spin::Mutex<Workspace>,
}

impl Matcher {
    /// A matcher at the start of the grammar, with the default [`MatcherLimits`] (about 2 MB).
    pub fn new(grammar: Arc<Grammar>) -> Matcher {
        Self::with_limits(grammar, MatcherLimits::default())
    }

    pub fn with_limits(grammar: Arc<Grammar>, limits: MatcherLimits) -> Matcher {
        let limits = MatcherLimits {
            max_stacks: limits.max_stacks.max(1),
            max_nodes: limits.max_nodes.max(16),
            max_set_entries: limits.max_set_entries.max(16),
            ..limits
        };
        let work = Workspace {
            nodes: Vec::with_capacity(limits.max_nodes),
            spare: Vec::with_capacity(limits.max_nodes),
            forward: vec![NOT_COPIED; limits.max_nodes],
            sets: Vec::with_capacity(limits.max_set_entries),
            base_len: 0,
            frames: vec![Frame::default(); limits.max_token_bytes + 1],
        };
        let mut matcher = Matcher {
            grammar,
            limits,
            work: spin::Mutex::new(work),
        };
        matcher.reset();
        matcher
    }

    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// Back to the start of the grammar (nothing consumed).
    pub fn reset(&mut self) {
        let ws = self.work.get_mut();
        ws.nodes.clear();
        ws.sets.clear();
        ws.nodes.push(Node {
            pos: Grammar::START,
            parent: EMPTY_STACK,
            depth: 1,
        });
        ws.sets.push(0);
        ws.base_len = 1;
    }

    /// Whether `bytes` could come next (all of them, in order). Allocates nothing.
    pub fn allows(&self, bytes: &[u8]) -> bool {
        let mut ws = self.work.lock();
        let (base_len, base_nodes) = (ws.base_len, ws.nodes.len());
        let result = run(&self.grammar, &self.limits, &mut ws, bytes).is_some();
        ws.sets.truncate(base_len);
        ws.nodes.truncate(base_nodes);
        result
    }

    /// Consumes `bytes`: true if the grammar allows them, false (and nothing consumed)
    /// otherwise. Allocates nothing.
    pub fn advance(&mut self, bytes: &[u8]) -> bool {
        let ws = self.work.get_mut();
        let (base_len, base_nodes) = (ws.base_len, ws.nodes.len());
        let Some(new_set) = run(&self.grammar, &self.limits, ws, bytes) else {
            ws.sets.truncate(base_len);
            ws.nodes.truncate(base_nodes);
            return false;
        };
        // The new set becomes the committed one; its nodes are copied to the bottom of the
        // arena so that the old state's nodes do not pile up.
        ws.sets.copy_within(new_set.clone(), 0);
        ws.sets.truncate(new_set.len());
        ws.base_len = new_set.len();
        compact(ws, 0, 0..new_set.len());
        true
    }

    /// Whether what was consumed is a whole sentence of the grammar: ending generation now is
    /// allowed.
    pub fn is_complete(&self) -> bool {
        let ws = self.work.lock();
        let g = &*self.grammar;
        ws.sets[..ws.base_len].iter().any(|&stack| {
            let mut n = stack;
            while n != EMPTY_STACK {
                let node = ws.nodes[n as usize];
                if !g.nullable[node.pos as usize] {
                    return false;
                }
                n = node.parent;
            }
            true
        })
    }

    /// Complete, and no byte may follow: generation can stop.
    pub fn is_finished(&self) -> bool {
        if !self.is_complete() {
            return false;
        }
        let ws = self.work.lock();
        let g = &*self.grammar;
        ws.sets[..ws.base_len].iter().all(|&stack| {
            let mut n = stack;
            while n != EMPTY_STACK {
                let node = ws.nodes[n as usize];
                if !g.first[node.pos as usize].is_empty() {
                    return false;
                }
                if !g.nullable[node.pos as usize] {
                    break;
                }
                n = node.parent;
            }
            true
        })
    }

    /// The token mask: bit `id % 64` of `allowed[id / 64]` is set iff token `id`'s bytes may
    /// come next. Every other bit (tokens not in the trie, ids beyond it) is cleared. Walks the
    /// trie depth-first, one step of the stack set per edge, skipping a subtree once its set
    /// is empty. Allocates nothing.
    pub fn fill_allowed(&mut self, trie: &TokenTrie, allowed: &mut [u64]) {
        allowed.fill(0);
        let g = &*self.grammar;
        let limits = &self.limits;
        let ws = self.work.get_mut();
        let base_len = ws.base_len;
        let base_nodes = ws.nodes.len();
        ws.frames[0] = Frame {
            set_start: 0,
            set_end: base_len,
            node_mark: base_nodes,
            class: NO_CLASS,
            fixed: ByteSet::EMPTY,
        };
        ws.frames[1].class = NO_CLASS;
        let n = trie.len();
        let mut i = 0;
        while i < n {
            let depth = trie.depth[i] as usize;
            if depth > limits.max_token_bytes {
                i = trie.subtree_end[i] as usize;
                continue;
            }
            let class = g.byte_class[trie.byte[i] as usize] as u16;
            let parent = ws.frames[depth - 1];
            let previous = ws.frames[depth];
            if parent.fixed.contains(class as u8) {
                ws.sets.truncate(parent.set_end);
                ws.nodes.truncate(parent.node_mark);
                ws.frames[depth] = Frame { class, ..parent };
            } else if previous.class == class {
                // A sibling with a byte of the same class went first: its set is this one,
                // and still lies just above the parent's (its subtree's work is above it).
                if previous.set_start == previous.set_end {
                    i = trie.subtree_end[i] as usize;
                    continue;
                }
                ws.sets.truncate(previous.set_end);
                ws.nodes.truncate(previous.node_mark);
            } else {
                ws.sets.truncate(parent.set_end);
                ws.nodes.truncate(parent.node_mark);
                let set = step(
                    g,
                    limits,
                    ws,
                    parent.set_start..parent.set_end,
                    trie.byte[i],
                );
                if set.is_empty() {
                    ws.frames[depth] = Frame {
                        set_start: set.start,
                        set_end: set.end,
                        node_mark: ws.nodes.len(),
                        class,
                        fixed: ByteSet::EMPTY,
                    };
                    i = trie.subtree_end[i] as usize;
                    continue;
                }
                let parent_set = parent.set_start..parent.set_end;
                if same_set(&ws.nodes, &ws.sets[parent_set], &ws.sets[set.clone()]) {
                    // The byte's class maps the parent's set to itself: remember it, and let
                    // this depth share the parent's set.
                    ws.sets.truncate(parent.set_end);
                    ws.nodes.truncate(parent.node_mark);
                    ws.frames[depth - 1].fixed.insert(class as u8);
                    ws.frames[depth] = Frame {
                        class,
                        ..ws.frames[depth - 1]
                    };
                } else {
                    ws.frames[depth] = Frame {
                        set_start: set.start,
                        set_end: set.end,
                        node_mark: ws.nodes.len(),
                        class,
                        fixed: ByteSet::EMPTY,
                    };
                }
            }
            if let Some(child) = ws.frames.get_mut(depth + 1) {
                child.class = NO_CLASS;
            }
            for &id in trie.tokens_at(i) {
                if let Some(word) = allowed.get_mut(id as usize / 64) {
                    *word |= 1 << (id % 64);
                }
            }
            i += 1;
        }
        ws.sets.truncate(base_len);
        ws.nodes.truncate(base_nodes);
    }
}

/// Steps the committed set through `bytes`; the final set's range in `ws.sets`, or `None` if
/// some byte leaves no stack alive. Leaves its scratch nodes and sets in place.
fn run(
    g: &Grammar,
    limits: &MatcherLimits,
    ws: &mut Workspace,
    bytes: &[u8],
) -> Option<Range<usize>> {
    let base_len = ws.base_len;
    let base_nodes = ws.nodes.len();
    let mut set = 0..base_len;
    for &b in bytes {
        let next = step(g, limits, ws, set.clone(), b);
        if next.is_empty() {
            return None;
        }
        // Only the newest set is needed: move it down over the previous scratch sets.
        ws.sets.copy_within(next.clone(), base_len);
        ws.sets.truncate(base_len + next.len());
        set = base_len..base_len + next.len();
        // A long input would fill the arena with dead nodes: copy the live ones down.
        if ws.nodes.len() - base_nodes > (limits.max_nodes - base_nodes) / 2 {
            compact(ws, base_nodes, set.clone());
        }
    }
    Some(set)
}

/// Every stack of `from` advanced by `byte`, duplicates removed: the new set, appended to
/// `ws.sets`.
fn step(
    g: &Grammar,
    limits: &MatcherLimits,
    ws: &mut Workspace,
    from: Range<usize>,
    byte: u8,
) -> Range<usize> {
    let out_start = ws.sets.len();
    let mut stepper = Stepper {
        g,
        limits,
        ws,
        out_start,
        byte,
    };
    for k in from {
        let top = stepper.ws.sets[k];
        if top == EMPTY_STACK {
            continue;
        }
        let node = stepper.ws.nodes[top as usize];
        stepper.match_at(node.pos, node.parent, node.depth - 1);
    }
    out_start..stepper.ws.sets.len()
}

struct Stepper<'a> {
    g: &'a Grammar,
    limits: &'a MatcherLimits,
    ws: &'a mut Workspace,
    out_start: usize,
    byte: u8,
}

impl Stepper<'_> {
    /// Matches `self.byte` at grammar position `pos` with `parent` below it (of depth
    /// `parent_depth`), expanding rule references on the way: every resulting stack goes to
    /// the output set.
    fn match_at(&mut self, pos: u32, parent: u32, parent_depth: u32) {
        let g = self.g;
        let b = self.byte;
        match g.code[pos as usize] {
            Op::End => {
                if parent != EMPTY_STACK {
                    let p = self.ws.nodes[parent as usize];
                    self.match_at(p.pos, p.parent, p.depth - 1);
                }
            }
            Op::Byte(s) => {
                if !g.sets[s as usize].contains(b) {
                    return;
                }
                let next = pos + 1;
                let stack = if g.code[next as usize] == Op::End {
                    parent
                } else {
                    match self.push_node(next, parent, parent_depth) {
                        Some(n) => n,
                        None => return,
                    }
                };
                self.add(stack);
            }
            Op::Call(r) => {
                let r = r as usize;
                if g.rule_nullable[r] {
                    // The rule matches nothing and the byte goes to what follows it.
                    self.match_at(pos + 1, parent, parent_depth);
                }
                if !g.rule_first[r].contains(b) {
                    return;
                }
                // Where to go when the rule ends; a call in tail position returns straight
                // to the parent, so right recursion does not deepen the stack.
                let (cont, cont_depth) = if g.code[pos as usize + 1] == Op::End {
                    (parent, parent_depth)
                } else {
                    match self.push_node(pos + 1, parent, parent_depth) {
                        Some(n) => (n, parent_depth + 1),
                        None => return,
                    }
                };
                for &alt in g.alternatives(r as u32) {
                    if g.first[alt as usize].contains(b) {
                        self.match_at(alt, cont, cont_depth);
                    }
                }
            }
        }
    }

    fn push_node(&mut self, pos: u32, parent: u32, parent_depth: u32) -> Option<u32> {
        let nodes = &mut self.ws.nodes;
        if parent_depth >= self.limits.max_depth || nodes.len() >= self.limits.max_nodes {
            return None;
        }
        nodes.push(Node {
            pos,
            parent,
            depth: parent_depth + 1,
        });
        Some(nodes.len() as u32 - 1)
    }

    /// Adds a stack to the output set unless an equal one is there already.
    fn add(&mut self, stack: u32) {
        let ws = &mut *self.ws;
        let out = &ws.sets[self.out_start..];
        if out.len() >= self.limits.max_stacks || ws.sets.len() >= self.limits.max_set_entries {
            return;
        }
        if out.iter().any(|&other| same_stack(&ws.nodes, other, stack)) {
            return;
        }
        ws.sets.push(stack);
    }
}

/// The same stacks in the same order (what a step from the same set produces again).
fn same_set(nodes: &[Node], a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| same_stack(nodes, x, y))
}

fn same_stack(nodes: &[Node], mut a: u32, mut b: u32) -> bool {
    loop {
        if a == b {
            return true;
        }
        if a == EMPTY_STACK || b == EMPTY_STACK {
            return false;
        }
        let (na, nb) = (nodes[a as usize], nodes[b as usize]);
        if na.pos != nb.pos || na.depth != nb.depth {
            return false;
        }
        a = na.parent;
        b = nb.parent;
    }
}

/// Copies the nodes at or above `keep_below` that the stacks `ws.sets[set]` reach down to
/// `keep_below` and up, rewriting the stacks; nodes below `keep_below` stay where they are.
fn compact(ws: &mut Workspace, keep_below: usize, set: Range<usize>) {
    ws.spare.clear();
    for k in set {
        let top = ws.sets[k];
        ws.sets[k] = copy_node(ws, keep_below, top);
    }
    let old_len = ws.nodes.len();
    ws.forward[keep_below..old_len].fill(NOT_COPIED);
    ws.nodes.truncate(keep_below);
    // Same capacity on both sides and fewer live nodes than before: no allocation.
    ws.nodes.extend_from_slice(&ws.spare);
}

/// The node's new index (copying its parents first); recursion as deep as the stack.
fn copy_node(ws: &mut Workspace, keep_below: usize, n: u32) -> u32 {
    if n == EMPTY_STACK || (n as usize) < keep_below {
        return n;
    }
    if ws.forward[n as usize] != NOT_COPIED {
        return ws.forward[n as usize];
    }
    let node = ws.nodes[n as usize];
    let parent = copy_node(ws, keep_below, node.parent);
    ws.spare.push(Node { parent, ..node });
    let new = (keep_below + ws.spare.len() - 1) as u32;
    ws.forward[n as usize] = new;
    new
}
