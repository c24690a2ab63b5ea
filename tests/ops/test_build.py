"""The op build system: header edits rebuild the families that include them."""
from fsdlite.ops.build import OPS_ROOT, _sources, headers_digest, included_headers


def test_included_headers_follow_quoted_includes_transitively():
    headers = {str(h.relative_to(OPS_ROOT)) for h in included_headers(_sources('rulebook', with_cuda=True))}
    assert {'rulebook/sorted_rows.h', 'rulebook/rulebook.h', 'include/fsdlite_ops/common.h'} <= headers
    assert not any(h.startswith('knn/') for h in headers)  # only what the family includes


def test_headers_digest_changes_with_an_included_header_only(tmp_path):
    (tmp_path / 'op.cpp').write_text('#include <vector>\n#include "a.h"\nint f();\n')
    (tmp_path / 'a.h').write_text('#pragma once\n#include "b.h"\n')
    (tmp_path / 'b.h').write_text('inline int g() { return 1; }\n')
    (tmp_path / 'unused.h').write_text('inline int h() { return 1; }\n')
    sources = [str(tmp_path / 'op.cpp')]
    assert [h.name for h in included_headers(sources)] == ['a.h', 'b.h']
    before = headers_digest(sources)
    (tmp_path / 'unused.h').write_text('inline int h() { return 2; }\n')
    assert headers_digest(sources) == before
    (tmp_path / 'b.h').write_text('inline int g() { return 2; }\n')  # two levels down
    assert headers_digest(sources) != before
