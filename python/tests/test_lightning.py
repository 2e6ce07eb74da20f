"""sluice.lightning.SluiceCheckpointIO under a real Lightning Trainer (CPU)."""

import os

import pytest
import torch

lightning = pytest.importorskip("lightning")
import lightning as L  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

import sluice  # noqa: E402
from sluice.lightning import SluiceCheckpointIO  # noqa: E402


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 8, generator=g)
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return torch.utils.data.DataLoader(data, batch_size=8)


def trainer(tmp_path, epochs, checkpoint):
    return L.Trainer(max_epochs=epochs, plugins=[SluiceCheckpointIO()], callbacks=[checkpoint],
                     default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", devices=1)


def test_trainer_saves_keeps_top_k_and_resumes_through_sluice(tmp_path):
    torch.manual_seed(0)
    ckpt_dir = tmp_path / "ckpt"
    # A checkpoint every 4 steps, the last 2 kept: ModelCheckpoint removes
    # older ones through the plugin.
    keep = ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=4, save_top_k=2,
                           monitor="step", mode="max", save_last=True)
    model = Tiny()
    t = trainer(tmp_path, 2, keep)
    t.fit(model)
    # 16 steps: checkpoints at 4, 8, 12, 16; two left, as sluice checkpoints
    # in a store at the callback's directory, no .ckpt file written.
    listed = sluice.list_checkpoints(str(ckpt_dir))
    names = sorted(c["name"] for c in listed if c["complete"])
    assert names == ["epoch=1-step=12.ckpt", "epoch=1-step=16.ckpt", "last.ckpt"], names
    # last.ckpt was saved 4 times, each replacing the one before: one step left.
    assert [c["step"] for c in listed if c["name"] == "last.ckpt"] == [3]
    assert SluiceCheckpointIO().load_checkpoint(ckpt_dir / "last.ckpt")["global_step"] == 16
    assert not list(ckpt_dir.glob("*.ckpt"))
    best = keep.best_model_path
    assert os.path.basename(best) == "epoch=1-step=16.ckpt"
    state = SluiceCheckpointIO().load_checkpoint(best, weights_only=True)
    assert state["global_step"] == 16
    for k, v in model.state_dict().items():
        assert torch.equal(state["state_dict"][k], v), k

    # Resume: a new model and trainer pick up the weights, optimizer and step.
    resumed = Tiny()
    t2 = trainer(tmp_path, 3, ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=4,
                                              save_top_k=-1))
    t2.fit(resumed, ckpt_path=best)
    assert t2.global_step == 24
    assert len(sluice.list_checkpoints(str(ckpt_dir), "epoch=2-step=24.ckpt")) == 1

    # Saving one path twice replaces it, as Lightning's own writer does.
    io_plugin = SluiceCheckpointIO()
    for value in (1, 2):
        io_plugin.save_checkpoint({"global_step": 99, "v": torch.tensor(value)}, ckpt_dir / "manual.ckpt")
    io_plugin.teardown()
    assert io_plugin.load_checkpoint(ckpt_dir / "manual.ckpt")["v"].item() == 2
    assert len(sluice.list_checkpoints(str(ckpt_dir), "manual.ckpt")) == 1

    with pytest.raises(FileNotFoundError):
        SluiceCheckpointIO().load_checkpoint(ckpt_dir / "nothing.ckpt")
    SluiceCheckpointIO().remove_checkpoint(ckpt_dir / "nothing.ckpt")  # no error, as Lightning's
    sluice.close()
