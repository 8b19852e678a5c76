"""Patterns found while scoring held-out batches DB and DC and the whole labelled set (session 20), in our own
words. Each test that asks for a finding fails without the change it names; each one that asks for silence
guards that change against the false alarm it could raise."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def _project(root: Path, files: dict[str, str]) -> None:
    (root / "README.md").write_text("project\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


LOOP = """
    import torch
    from torch.utils.data import DataLoader
    from metrics import PSNR

    def train(model, optimizer, data):
        loader = DataLoader(data, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True)
        psnr = PSNR(255.0).cuda()
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            out = model(x)
            loss = torch.nn.functional.l1_loss(out, y)
            loss.backward()
            optimizer.step()
            quality = psnr(out, y)
"""


def test_a_helpers_branch_on_a_name_bound_to_a_reduction_is_hl005_at_the_call(tmp_path: Path):
    """edge-connect's metric: `mse = torch.mean((a - b) ** 2)` then `if mse == 0:` in another file, run every
    step. The test names no reduction itself; the name it reads was bound to one (effects._reduces follows it)."""
    _project(
        tmp_path,
        {
            "train.py": LOOP,
            "metrics.py": """
        import torch
        from torch import nn

        class PSNR(nn.Module):
            def __init__(self, top):
                super().__init__()
                self.top = top

            def __call__(self, a, b):
                mse = torch.mean((a.float() - b.float()) ** 2)
                if mse == 0:
                    return torch.tensor(0)
                return 10 * torch.log10(self.top**2 / mse)
    """,
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (15, "HL005") in hits


def test_a_helpers_branch_on_an_option_name_stays_silent(tmp_path: Path):
    """The negative side: `if self.eps == 0:` (an option set in `__init__`) and `if scale == 0:` (a number
    computed from options) in the same helper are not reductions of a tensor: no HL005 at the call."""
    _project(
        tmp_path,
        {
            "train.py": LOOP,
            "metrics.py": """
        import torch
        from torch import nn

        class PSNR(nn.Module):
            def __init__(self, top, eps=0):
                super().__init__()
                self.top, self.eps = top, eps

            def __call__(self, a, b):
                scale = self.top * 2 if self.eps else self.top
                if scale == 0:
                    scale = 1.0
                if self.eps == 0:
                    return torch.mean((a - b) ** 2) * scale
                return torch.mean((a - b) ** 2 + self.eps)
    """,
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert not [h for h in hits if h[1] == "HL005"]


def test_a_class_imported_from_a_package_folder_without_its_init_is_found(tmp_path: Path):
    """S3FD's `from layers.modules import MultiBoxLoss` where only `layers/modules/multibox_loss.py` is in
    the checkout (the re-exporting `__init__.py` is not): the one module of the folder that defines the class
    is the one the loop runs (imports.Project._in_folder), so its boolean-mask indexing is reported at the call."""
    _project(tmp_path, {
        "train.py": """
            import torch
            from layers.modules import MultiBoxLoss

            def train(net, optimizer, loader):
                criterion = MultiBoxLoss(3)
                for images, targets in loader:
                    images = images.cuda(non_blocking=True)
                    out = net(images)
                    loss = criterion(out, targets)
                    loss.backward()
                    optimizer.step()
        """,
        "layers/modules/multibox_loss.py": """
            import torch
            from torch import nn

            class MultiBoxLoss(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.n = n

                def forward(self, out, targets):
                    pos = targets > 0
                    picked = out[pos]
                    return picked.sum()
        """,
        "layers/modules/other.py": "import torch\n\n\ndef helper(x):\n    return x\n",
    })  # fmt: skip
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (10, "HL006") in hits


def test_a_name_narrowed_to_a_tensor_is_a_tensor_and_a_dicts_entries_may_be():
    """Conv-TasNet's `to_device`: `{key: to_cuda(dicts[key]) for key in dicts}` under `isinstance(dicts, dict)`,
    and `to_cuda` returning `datas.to(device)` under `isinstance(datas, torch.Tensor)`. Narrowing to a dict
    does not make the entries Python values, and narrowing to a tensor makes `datas` one: the blocking copy of
    the batch is HL012 (forks.narrowed)."""
    src = """
    import torch

    def to_device(dicts, device):
        def to_cuda(datas):
            if isinstance(datas, torch.Tensor):
                return datas.to(device)
            elif isinstance(datas, list):
                return [data.to(device) for data in datas]
            raise RuntimeError("not a tensor or list")
        if isinstance(dicts, dict):
            return {key: to_cuda(dicts[key]) for key in dicts}
        raise RuntimeError("not a dict")

    def train(model, optimizer, loader, device):
        for egs in loader:
            egs = to_device(egs, device)
            loss = model(**egs)
            loss.backward()
            optimizer.step()
    """
    assert (7, "HL012") in found(src)


def test_a_name_narrowed_to_a_number_is_still_not_a_tensor():
    """The negative side: `if isinstance(lr, float): print(lr.hex())`-style code keeps a narrowed number out of
    the tensor rules: `float(v)` on `v` narrowed to `int` in the step is no HL001."""
    src = """
    import torch

    def train(model, optimizer, loader, device):
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            loss = model(x)
            loss.backward()
            optimizer.step()
            v = optimizer.param_groups[0]["lr"]
            if isinstance(v, int):
                v = float(v)
    """
    assert not [h for h in found(src) if h[1] == "HL001"]


def test_a_wall_clock_boundary_is_a_log_gate():
    """retinanet-examples reads its losses when `profiler.totals["train"] > 60` (once a minute), not every
    step: a test naming the profiler or the elapsed time is a boundary (gates.GATE_WORDS)."""
    src = """
    import torch

    def train(model, optimizer, loader, profiler):
        losses = []
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            loss = model(x, y)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
            if profiler.totals["train"] > 60:
                print(torch.stack(losses).mean().item())
                losses = []
    """
    assert not [h for h in found(src) if h[1] == "HL001"]


def test_a_batch_wrapped_in_variable_before_its_copy_is_still_on_the_host():
    """tacotron's step sorts the batch by length, `x = x[indices]`, then `x = Variable(x)`, then `x = x.cuda()`:
    the sort indexes a host tensor with a host index, nothing is copied (provenance._moved_later looks through
    a wrapper of the name itself). The copy itself is the finding."""
    src = """
    import torch
    from torch.autograd import Variable

    def train(model, optimizer, loader):
        for x, lengths, y in loader:
            _, indices = torch.sort(lengths.view(-1), dim=0, descending=True)
            x, y = x[indices], y[indices]
            x, y = Variable(x), Variable(y)
            x, y = x.cuda(), y.cuda()
            loss = model(x, y)
            loss.backward()
            optimizer.step()
    """
    hits = found(src)
    assert not [h for h in hits if h[1] == "HL024"]
    assert (10, "HL012") in hits


def test_a_branch_for_pytorch_0_3_is_dead_code_today():
    """`torch_ver = torch.__version__[:3]` ... `if torch_ver == '0.3': images = Variable(images).cuda()`: a run
    today takes the `else`, which is the one reported (branches.never_runs)."""
    src = """
    import torch
    from torch.autograd import Variable

    torch_ver = torch.__version__[:3]

    def train(model, optimizer, loader):
        for images, labels in loader:
            if torch_ver == '0.3':
                images = Variable(images).cuda()
            else:
                images = images.cuda()
            loss = model(images, labels)
            loss.backward()
            optimizer.step()
    """
    hits = found(src)
    assert (10, "HL012") not in hits
    assert (12, "HL012") in hits


def test_a_parameter_is_the_class_its_callers_in_other_files_hand_it(tmp_path: Path):
    """GDN's `train(model, ...)` in train.py runs `model(x, edge_index)` every step; only main.py says what
    the model is (`self.model = GDN(...)`, then `train(self.model, ...)`), and GDN's forward copies a host
    `torch.arange` to the device: reported at the call (callsites.param_classes). DETR's factory form
    (`model, criterion = build(args)`, returning `SetCriterion(...)`) types `criterion` the same way."""
    _project(tmp_path, {
        "train.py": """
            import torch

            def train(model, criterion, optimizer, loader, device):
                for x, y in loader:
                    x = x.to(device, non_blocking=True)
                    out = model(x)
                    loss = criterion(out, y)
                    loss.backward()
                    optimizer.step()
        """,
        "main.py": """
            import torch
            from models import Net, build
            from train import train

            class Main:
                def __init__(self, loader):
                    self.model = Net(4).to("cuda")
                    self.loader = loader

                def run(self):
                    _, criterion = build(4)
                    opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
                    train(self.model, criterion, opt, self.loader, "cuda")
        """,
        "models.py": """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.lin = nn.Linear(n, n)

                def forward(self, x):
                    idx = torch.arange(x.shape[0]).to(x.device)
                    return self.lin(x)[idx]

            class SetCriterion(nn.Module):
                def forward(self, out, y):
                    return out.sum() + y.float().sum().item()

            def build(n):
                criterion = SetCriterion()
                return Net(n), criterion
        """,
    })  # fmt: skip
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (7, "HL012") in hits
    assert (8, "HL001") in hits


def test_callers_that_hand_a_parameter_different_classes_type_it_as_neither(tmp_path: Path):
    """The negative side: one caller hands `train` a `Net`, another a `Plain` model without the host copy;
    which runs is the caller's choice, so nothing is reported at the call."""
    _project(tmp_path, {
        "train.py": """
            import torch

            def train(model, optimizer, loader, device):
                for x, y in loader:
                    x = x.to(device, non_blocking=True)
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
        """,
        "a.py": "from models import Net\nfrom train import train\n\ntrain(Net(4).cuda(), None, [], 'cuda')\n",
        "b.py": "from models import Plain\nfrom train import train\n\ntrain(Plain(4).cuda(), None, [], 'cuda')\n",
        "models.py": """
            import torch
            from torch import nn

            class Net(nn.Module):
                def forward(self, x):
                    return x[torch.arange(x.shape[0]).to(x.device)]

            class Plain(nn.Module):
                def forward(self, x):
                    return x * 2
        """,
    })  # fmt: skip
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (7, "HL012") not in hits


def test_a_batch_named_like_a_model_is_still_a_batch():
    """honk's loop: `for batch_idx, (model_in, labels) in enumerate(train_loader): model_in = model_in.cuda()`.
    A name the loop binds from a loader is a batch, whatever its spelling (provenance.batch_target); a model
    moved in a loop over models stays a model move."""
    src = """
    import torch

    def train(model, models, optimizer, criterion, train_loader):
        for batch_idx, (model_in, labels) in enumerate(train_loader):
            model_in = model_in.cuda()
            labels = labels.cuda()
            for net in models:
                net.cuda()
            loss = criterion(model(model_in), labels)
            loss.backward()
            optimizer.step()
    """
    hits = found(src)
    assert (6, "HL012") in hits and (7, "HL012") in hits
    assert (9, "HL012") not in hits


def test_a_branch_on_pythons_max_of_numbers_read_back_is_not_a_tensor_reduction(tmp_path: Path):
    """detectron2-style `gather`: `size_list = [int(s.item()) for s in sizes]`, `max_size = max(size_list)`,
    then `if local_size != max_size:`. Python's `max` of numbers is no tensor reduction (effects._reduces
    follows names only to a tensor's own reductions); the helper runs only on several processes besides."""
    _project(tmp_path, {"train.py": LOOP.replace("from metrics import PSNR", "from metrics import PSNR, gather")
                        .replace("quality = psnr(out, y)", "quality = gather(loss)"),
                        "metrics.py": """
        import torch
        import torch.distributed as dist
        from torch import nn

        class PSNR(nn.Module):
            def __call__(self, a, b):
                return torch.mean((a - b) ** 2)

        def gather(t):
            local_size = torch.tensor([t.numel()], device=t.device)
            sizes = [torch.zeros_like(local_size) for _ in range(dist.get_world_size())]
            dist.all_gather(sizes, local_size)
            size_list = [int(s.item()) for s in sizes]
            max_size = max(size_list)
            if local_size != max_size:
                t = torch.cat([t, t.new_zeros(max_size - t.numel())])
            return t
    """})  # fmt: skip
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (15, "HL005") not in hits


def test_an_attribute_set_from_an_init_parameter_is_the_class_the_constructor_is_handed(tmp_path: Path):
    """`Trainer(Net(...))` in main.py and `self.model = model` in `Trainer.__init__`: `self.model(x)` in the
    trainer's step runs `Net.forward` (callsites.typed_receiver reads the constructor's callers); `agent.update(b)`
    with `train(agent, ...)` handed `Agent()` runs `Agent.update`, a method name common enough that no guess
    by name would be made."""
    _project(tmp_path, {
        "trainer.py": """
            import torch

            class Trainer:
                def __init__(self, model, optimizer):
                    self.model = model
                    self.optimizer = optimizer

                def fit(self, loader):
                    for x, y in loader:
                        x = x.cuda(non_blocking=True)
                        loss = self.model(x).sum()
                        loss.backward()
                        self.optimizer.step()

            def train(agent, buffer):
                for step in range(100):
                    batch = buffer.sample()
                    agent.update(batch)
        """,
        "main.py": """
            import torch
            from models import Agent, make_net
            from trainer import Trainer, train

            net = make_net().cuda()  # (a factory, then a wrapper: the binding that reaches the call)
            net = torch.nn.parallel.DistributedDataParallel(net)
            Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1)).fit([])
            train(Agent(), None)
        """,
        "models.py": """
            import torch
            from torch import nn

            class Net(nn.Module):
                def forward(self, x):
                    return x * torch.arange(x.shape[-1]).to(x.device)

            def make_net():
                return Net()

            class Agent:
                def __init__(self):
                    self.net = nn.Linear(4, 1).cuda()
                    self.opt = torch.optim.Adam(self.net.parameters())

                def update(self, batch):
                    loss = self.net(batch).mean()
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
                    return loss.item()
        """,
    })  # fmt: skip
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "trainer.py")])]
    assert (12, "HL012") in hits
    assert (19, "HL001") in hits


def test_a_loader_builders_workers_parameter_given_0_by_every_caller_has_no_workers():
    """DialogueGCN's `get_IEMOCAP_loaders(..., num_workers=0)` builds its loaders with `num_workers=num_workers`
    and its one caller passes 0: no worker processes, nothing to pin or keep (loaders._constant_zero). A caller
    passing 4 makes them workers again."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def get_loaders(data, batch_size=32, num_workers=0):
        train_loader = DataLoader(data, batch_size=batch_size, num_workers=num_workers)
        return train_loader

    def main(data, model, optimizer):
        loader = get_loaders(data, num_workers={n})
        for epoch in range(10):
            for x, y in loader:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                loss = model(x, y)
                loss.backward()
                optimizer.step()
    """
    assert not [h for h in found(src.format(n=0)) if h[1] == "HL011"]
    assert (6, "HL011") in found(src.format(n=4))


def test_a_shared_train_or_eval_function_evaluates_in_the_calls_that_leave_its_flag_at_false():
    """`def train_or_eval_model(model, ..., optimizer=None, train=False)` called with `True` for training and
    with the flag left out for validation (DialogueGCN): the validation calls evaluate, and nothing turns
    gradients off in them (evals.evaluation reads the flag's default)."""
    src = """
    import torch

    def train_or_eval_model(model, dataloader, optimizer=None, train=False):
        if train:
            model.train()
        else:
            model.eval()
        for x, y in dataloader:
            x = x.cuda(non_blocking=True)
            loss = model(x, y)
            if train:
                loss.backward()
                optimizer.step()

    def main(model, optimizer, train_loader, valid_loader):
        for e in range(10):
            train_or_eval_model(model, train_loader, optimizer, True)
            train_or_eval_model(model, valid_loader{extra})
    """
    assert (4, "HL018") in found(src.format(extra=""))
    assert not [h for h in found(src.format(extra=", optimizer, True")) if h[1] == "HL018"]


def test_a_library_dataloader_subclass_given_workers_is_judged_as_a_dataloader():
    """torchmeta's `BatchMetaDataLoader(dataset, batch_size=..., num_workers=args.num_workers)` feeding CUDA
    without `pin_memory` (pytorch-meta's MAML example): a `*DataLoader` given `num_workers` takes DataLoader's
    options (loaders.loader_class)."""
    src = """
    import argparse
    import torch
    from torchmeta.utils.data import BatchMetaDataLoader

    def main(args, dataset, model, optimizer):
        dataloader = BatchMetaDataLoader(dataset, batch_size=16, shuffle=True, num_workers=args.num_workers)
        for epoch in range(10):
            for batch in dataloader:
                x = batch["train"][0].cuda(non_blocking=True)
                loss = model(x)
                loss.backward()
                optimizer.step()

    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--num-workers", type=int, default=1)
        main(parser.parse_args(), None, None, None)
    """
    assert (7, "HL011") in found(src)
