"""The principal of a client certificate (:mod:`seqkeeper.principal`):
Kafka's own examples of ``ssl.principal.mapping.rules`` (its documentation
and ``SslPrincipalMapperTest``), RFC 2253 rendering as Java's
``X500Principal.getName()`` does it, properties of both, and, with
``KAFKA_HOME`` and Java, both compared with the JVM's on generated names
and rules (Kafka's ``SslPrincipalMapper`` from its ``kafka-clients`` jar)."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from cryptography import x509
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.broker import kafka_home_from_env
from seqkeeper.principal import MappingError, PrincipalMapper, parse_rules, rfc2253

# -- Kafka's examples -------------------------------------------------------------


def mapper_string(rules: str) -> str:
    """``SslPrincipalMapper.toString()`` of what Kafka's parser would make of ``rules``."""
    return f"SslPrincipalMapper(rules = [{', '.join(str(r) for r in parse_rules(rules))}])"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_kafkas_valid_rules(rules: str) -> None:
    assert parse_rules(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_kafkas_invalid_rules(rules: str) -> None:
    with pytest.raises(MappingError):
        parse_rules(rules)


def test_kafkas_mapper_example() -> None:
    mapper = PrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


def test_the_documentations_example() -> None:
    """docs/security.html, ``ssl.principal.mapping.rules``."""
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert (
        mapper.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
        == "serviceuser"
    )
    assert (
        mapper.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
        == "adminuser@admin"
    )


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, "
            "DEFAULT, /DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, "
            "DEFAULT, /DEFAULT/,DEFAULT",
        ),
    ],
)
def test_kafkas_rules_splitting(expected: str, rules: str) -> None:
    assert mapper_string(rules) == f"SslPrincipalMapper(rules = {expected})"


def test_kafkas_comma_with_whitespace() -> None:
    mapper = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_the_issues_rule_and_a_name_no_rule_maps() -> None:
    mapper = PrincipalMapper("RULE:^CN=([^,]+),.*$/$1/L,DEFAULT")
    assert mapper.name("CN=Worker-A,OU=streams,O=Example") == "worker-a"
    assert mapper.name("CN=worker-a") == "CN=worker-a"  # (the rule needs a second RDN)
    with pytest.raises(MappingError, match="no rule applies to 'CN=worker-a'.*DEFAULT"):
        PrincipalMapper("RULE:^CN=([^,]+),.*$/$1/L").name("CN=worker-a")


def test_back_references_as_java_reads_them() -> None:
    """``$12`` with one group is group 1 and a ``2``; ``$2`` with one group
    is a literal ``$2`` (Kafka escapes it); ``\\$`` a dollar."""
    assert PrincipalMapper("RULE:^CN=(.*)$/$12/").name("CN=a") == "a2"
    assert PrincipalMapper("RULE:^CN=(.*)$/$2-$1/").name("CN=a") == "$2-a"
    assert PrincipalMapper("RULE:^CN=(.*)$/\\$$1/").name("CN=a") == "$a"
    assert PrincipalMapper("RULE:^CN=(?<user>.*)$/${user}/U").name("CN=a") == "A"
    with pytest.raises(MappingError, match="no group 1"):
        PrincipalMapper("RULE:^CN=.*$/$1/").name("CN=a")


def test_a_pattern_python_cannot_read_is_refused_with_the_rule() -> None:
    with pytest.raises(MappingError, match=r"\\p\{L\}"):
        parse_rules("RULE:^CN=(\\p{L}+)$/$1/,DEFAULT")


# -- RFC 2253 as X500Principal.getName() ----------------------------------------------


def name_of(*rdns: list[tuple[ObjectIdentifier, str]]) -> bytes:
    """The DER name with these RDNs, in encoded order (the last is written first)."""
    return x509.Name(
        [x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in r]) for r in rdns]
    ).public_bytes()


CN, OU, ORG = NameOID.COMMON_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.ORGANIZATION_NAME


@pytest.mark.parametrize(
    ("der", "expected"),
    [
        (
            name_of([(ORG, "Example")], [(OU, "streams")], [(CN, "worker-a")]),
            "CN=worker-a,OU=streams,O=Example",
        ),
        (name_of([(CN, 'a,b+c"d\\e')]), 'CN=a\\,b\\+c\\"d\\\\e'),
        (name_of([(CN, "x=y#z<>;")]), "CN=x\\=y\\#z\\<\\>\\;"),
        (name_of([(CN, "  two  ")]), "CN=\\ \\ two\\ \\ "),
        (name_of([(CN, "#lead")]), "CN=\\#lead"),
        (name_of([(CN, "nul\0")]), "CN=nul\\00"),
        (name_of([(CN, "élan_*@")]), "CN=élan_*@"),
        (
            name_of([(NameOID.DOMAIN_COMPONENT, "com")], [(NameOID.USER_ID, "u1")]),
            "UID=u1,DC=com",
        ),
        (
            name_of([(NameOID.EMAIL_ADDRESS, "a@b.c"), (CN, "w")]),
            "CN=w+1.2.840.113549.1.9.1=#1605614062" + "2e63",
        ),
        (name_of([(NameOID.SERIAL_NUMBER, "7")]), "2.5.4.5=#130137"),
        (x509.Name([]).public_bytes(), ""),
    ],
)
def test_rfc2253_as_java_writes_it(der: bytes, expected: str) -> None:
    assert rfc2253(der) == expected


def test_a_value_of_another_type_is_written_in_hex() -> None:
    der = x509.Name([x509.NameAttribute(CN, "ab", _ASN1Type.UniversalString)]).public_bytes()
    assert rfc2253(der) == "CN=#1c08" + "00000061" + "00000062"


# (the characters that need care, and some that do not)
VALUE_CHARS = st.sampled_from(list(',=+<>#;"\\ \r\0aZ9-_.*é€'))
NAME_TYPES = [CN, OU, ORG, NameOID.LOCALITY_NAME, NameOID.STREET_ADDRESS, NameOID.DOMAIN_COMPONENT]


def unescape(value: str) -> str:
    """An RFC 2253 value back to its text (``\\00``, ``\\c``)."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            if value[i + 1 : i + 3] == "00":
                out.append("\0")
                i += 3
            else:
                out.append(value[i + 1])
                i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def split_unescaped(text: str, sep: str) -> list[str]:
    parts, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == sep:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from(NAME_TYPES), st.text(VALUE_CHARS, min_size=1, max_size=8)),
            min_size=1,
            max_size=3,
            unique_by=lambda a: a[0],
        ),
        min_size=1,
        max_size=4,
    )
)
def test_rfc2253_reads_back_to_the_names_attributes(
    rdns: list[list[tuple[ObjectIdentifier, str]]],
) -> None:
    """Split at the unescaped ``,`` and ``+``, unescaped, the text gives back
    each attribute, RDNs last first; no separator is left unescaped inside
    a value."""
    der = name_of(*rdns)
    text = rfc2253(der)
    read = [
        sorted(tuple(unescape(a).split("=", 1)) for a in split_unescaped(r, "+"))
        for r in split_unescaped(text, ",")
    ]
    keywords = {
        CN: "CN",
        OU: "OU",
        ORG: "O",
        NameOID.LOCALITY_NAME: "L",
        NameOID.STREET_ADDRESS: "STREET",
        NameOID.DOMAIN_COMPONENT: "DC",
    }
    expected = [sorted((keywords[o], v) for o, v in r) for r in reversed(rdns)]
    assert read == expected


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=30).filter(
        lambda t: not any(c in t for c in "\n\r\x85\u2028\u2029")
    )
)
def test_default_keeps_a_name_and_a_catch_all_rule_cases_it(name: str) -> None:
    assert PrincipalMapper("DEFAULT").name(name) == name
    assert PrincipalMapper("").rules == ()
    assert PrincipalMapper("RULE:(.*)/$1/L,DEFAULT").name(name) == name.lower()
    assert PrincipalMapper("RULE:^(.*)$/x$1/U").name(name) == "X" + name.upper()


# -- the JVM's own answers -------------------------------------------------------------

ORACLE = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import javax.security.auth.x500.X500Principal;
import org.apache.kafka.common.security.ssl.SslPrincipalMapper;

public class PrincipalOracle {
    public static void main(String[] args) throws Exception {
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            String out;
            try {
                String text;
                if (f[0].equals("dn")) {
                    text = new X500Principal(hex.parseHex(f[1])).getName();
                } else {
                    SslPrincipalMapper m = SslPrincipalMapper.fromRules(
                        new String(hex.parseHex(f[1]), StandardCharsets.UTF_8));
                    text = f[0].equals("rules") ? m.toString()
                        : m.getName(new String(hex.parseHex(f[2]), StandardCharsets.UTF_8));
                }
                out = "ok\t" + hex.formatHex(text.getBytes(StandardCharsets.UTF_8));
            } catch (Exception e) {
                out = "error\t" + e.getClass().getSimpleName();
            }
            System.out.println(out);
        }
    }
}
"""


@pytest.fixture(scope="module")
def jvm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Ask the JVM: lines of tab-separated hex fields in, ``ok <hex>`` or
    ``error <class>`` out, one JVM for a whole batch."""
    home, java = kafka_home_from_env(), shutil.which("java")
    jars = sorted((home / "libs").glob("kafka-clients-*.jar")) if home else []
    if not (java and jars):
        pytest.skip("needs Java and KAFKA_HOME (Kafka's kafka-clients jar)")
    source = tmp_path_factory.mktemp("oracle") / "PrincipalOracle.java"
    source.write_text(ORACLE)

    def ask(lines: list[list[str]]) -> list[tuple[str, str]]:
        done = subprocess.run(
            [java, "-cp", str(jars[0]), str(source)],
            input="".join("\t".join(x) + "\n" for x in lines),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        answers = [tuple(a.split("\t", 1)) for a in done.stdout.splitlines()]
        assert len(answers) == len(lines), done.stderr[-3000:]
        return [(k, bytes.fromhex(v).decode() if k == "ok" else v) for k, v in answers]

    return ask


def ours(work: str, *args: str) -> tuple[str, str]:
    try:
        if work == "dn":
            return "ok", rfc2253(bytes.fromhex(args[0]))
        if work == "rules":
            return "ok", mapper_string(args[0])
        return "ok", PrincipalMapper(args[0]).name(args[1])
    except MappingError:
        return "error", ""


STRING_TYPES = [
    _ASN1Type.UTF8String,
    _ASN1Type.PrintableString,
    _ASN1Type.IA5String,
    _ASN1Type.BMPString,
    _ASN1Type.T61String,
    _ASN1Type.VisibleString,
    _ASN1Type.UniversalString,
]
ALL_TYPES = [
    *NAME_TYPES,
    NameOID.USER_ID,
    NameOID.EMAIL_ADDRESS,
    NameOID.SERIAL_NUMBER,
    NameOID.TITLE,
    ObjectIdentifier("1.2.3.4.5"),
]
# rules: patterns both regex engines read alike, replacements with Java's quirks
PATTERN_PARTS = [
    "^",
    "$",
    "CN=",
    "OU=",
    ",",
    "(",
    ")",
    "([^,]+)",
    "(.*?)",
    ".*",
    "[a-z]+",
    "\\\\,",
    "\\w",
    "|",
    "a",
    "a?",
    "(?<n>[A-Z]+)",
    "\\/",
]
REPLACEMENT_PARTS = ["$1", "$2", "$12", "$0", "${n}", "\\$", "\\\\", "@", "x", "$", "\\/", "L"]
RULE_CHARS = "RULE:DEFAULT/,\\ $1LU.*"
SUBJECTS = [
    "CN=Worker-A,OU=streams,O=Example",
    "CN=a\\,b,OU=x",
    "cn=x",
    "OU=JavaSoft,O=Sun",
    "CN=",
    "CN=ab/cd,O=$1",
    "",
]


def random_name(rng: random.Random) -> bytes:
    """A DER name: up to 4 RDNs of 1 to 3 attributes, every string type,
    values of the characters that need care."""
    rdns = []
    for _ in range(rng.randint(0, 4)):
        attrs: dict[tuple[str, str], x509.NameAttribute] = {}
        for _ in range(rng.randint(1, 3)):
            oid, kind = rng.choice(ALL_TYPES), rng.choice(STRING_TYPES)
            if kind == _ASN1Type.PrintableString:
                chars = "aZ9 '()+,-./:=?"
            elif kind in (_ASN1Type.UTF8String, _ASN1Type.UniversalString):
                chars = ',=+<>#;"\\ \r\0aZ9-_.*@é€𝄞'
            else:
                chars = ',=+<>#;"\\ \r\0aZ9-_.*@'
            value = "".join(rng.choice(chars) for _ in range(rng.randint(1, 10)))
            attrs[(oid.dotted_string, value)] = x509.NameAttribute(oid, value, kind)
        rdns.append(x509.RelativeDistinguishedName(list(attrs.values())))
    return x509.Name(rdns).public_bytes()


def random_rules(rng: random.Random) -> str:
    rules = []
    for _ in range(rng.randint(0, 4)):
        kind = rng.randrange(3)
        if kind == 0:
            rules.append("DEFAULT")
        elif kind == 1:
            pattern = "".join(rng.choice(PATTERN_PARTS) for _ in range(rng.randint(0, 6)))
            replacement = "".join(rng.choice(REPLACEMENT_PARTS) for _ in range(rng.randint(0, 3)))
            rules.append(f"RULE:{pattern}/{replacement}/{rng.choice(['', 'L', 'U'])}")
        else:
            rules.append("".join(rng.choice(RULE_CHARS) for _ in range(rng.randint(0, 12))))
    return rng.choice([",", ", ", " ,"]).join(rules)


@pytest.mark.integration
def test_the_jvm_agrees(jvm) -> None:  # type: ignore[no-untyped-def]
    """1,000 generated names render as ``X500Principal.getName()`` does;
    1,000 generated rule lists parse (``toString()``) and map a name as
    Kafka's ``SslPrincipalMapper`` does, or both refuse them. (Seeded: a
    failure names its case; one JVM for all.)"""
    rng = random.Random(44)
    names = [random_name(rng) for _ in range(1000)]
    rules = [(random_rules(rng), rng.choice(SUBJECTS)) for _ in range(1000)]
    asked = (
        [["dn", n.hex()] for n in names]
        + [["rules", r.encode().hex()] for r, _ in rules]
        + [["map", r.encode().hex(), s.encode().hex()] for r, s in rules]
    )
    answers = jvm(asked)
    mapped = 0
    for question, (kind, text) in zip(asked, answers, strict=True):
        args = [bytes.fromhex(a).decode() if question[0] != "dn" else a for a in question[1:]]
        mine = ours(question[0], *args)
        if kind == "error":
            assert mine[0] == "error", (question[0], args, text, mine)
        else:
            assert mine == ("ok", text), (question[0], args)
            mapped += question[0] == "map"
    assert mapped > 100  # (the comparison is not all refusals)
